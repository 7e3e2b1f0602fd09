"""The API dimension of the conformance suite: the ``api`` fixture, blocking and asyncio.

A test that runs workflows takes ``api`` and calls through it (``api.run``,
``api.run_result``, ``api.submit``, ``api.status``, ``api.worker``); it then runs
once on each API (ids ``blocking`` / ``asyncio``, ``tests/support/apis.py``). A test that
measures the blocking API itself (calls counted on the blocking store, a
decorator with no asyncio twin) is marked ``blocking_api``: it runs on the
blocking API only. A test that took ``api`` and made no call through it fails
at teardown: on the asyncio API it would otherwise pass while running nothing
of that API, and on the blocking one it has no reason to be run twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.apis import Api, AsyncioApi, BlockingApi

API_NAMES = ("blocking", "asyncio")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "api" not in metafunc.fixturenames:
        return
    blocking_only = metafunc.definition.get_closest_marker("blocking_api") is not None
    metafunc.parametrize("api", API_NAMES[:1] if blocking_only else API_NAMES, indirect=True)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    chosen: Api = AsyncioApi() if request.param == "asyncio" else BlockingApi()
    try:
        yield chosen
    finally:
        chosen.close()
    if chosen.calls.count == 0:
        pytest.fail(
            f"{request.node.nodeid} took the api fixture but made no call through the {chosen.name} API:"
            " call api.run / api.submit / ... (or drop the fixture and mark it blocking_api)",
            pytrace=False,
        )
