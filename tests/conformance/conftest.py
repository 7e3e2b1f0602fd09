"""Run a conformance module on both APIs: blocking (``run``) and asyncio (``arun``).

A module opts in with ``BOTH_APIS = True``; each of its tests then runs once
as written and once with the module's ``run``, ``run_result``, ``submit``,
``status`` and ``Worker`` replaced by the asyncio twins (``tests/apis.py``).
A test that measures the blocking API itself (calls counted on the blocking
store) is marked ``blocking_api``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apis import (
    AsyncWorkerBlocking,
    arun_blocking,
    arun_result_blocking,
    astatus_blocking,
    asubmit_blocking,
    close_twins,
)

TWINS = {
    "run": arun_blocking,
    "run_result": arun_result_blocking,
    "submit": asubmit_blocking,
    "status": astatus_blocking,
    "Worker": AsyncWorkerBlocking,
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not getattr(metafunc.module, "BOTH_APIS", False):
        return
    if metafunc.definition.get_closest_marker("blocking_api"):
        return
    metafunc.parametrize("api", ["sync", "async"], indirect=True)


@pytest.fixture(autouse=True)
def api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    mode = str(getattr(request, "param", "sync"))
    if mode == "async":
        for name, twin in TWINS.items():
            if name in vars(request.module):
                monkeypatch.setattr(request.module, name, twin)
    yield mode
    if mode == "async":
        close_twins()
