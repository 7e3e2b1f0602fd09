"""The ``api`` fixture holds a test to the API it says it runs (tests/conformance/conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONFTEST = """
from tests.conformance.conftest import api, pytest_generate_tests  # noqa: F401


def pytest_configure(config):
    config.addinivalue_line("markers", "blocking_api: runs on the blocking API only")
"""

TESTS = """
import pytest

from idemflow import pure
from idemflow.stores import MemoryStore


def test_calls_through_the_api(api):
    assert api.run(pure(1), request_id="r", store=MemoryStore()) == 1


def test_takes_the_api_and_never_calls_it(api):
    pass


@pytest.mark.blocking_api
def test_measures_the_blocking_api(api):
    assert api.name == "blocking"
    assert api.run(pure(2), request_id="r", store=MemoryStore()) == 2
"""


def test_each_api_runs_the_test_and_a_test_that_never_called_it_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_apis=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-rA")
    # The body of the test that never called passes; its teardown fails, on each API.
    result.assert_outcomes(passed=5, errors=2)
    result.stdout.fnmatch_lines(
        [
            "PASSED test_apis.py::test_calls_through_the_api[[]blocking[]]",
            "PASSED test_apis.py::test_calls_through_the_api[[]asyncio[]]",
            "PASSED test_apis.py::test_measures_the_blocking_api[[]blocking[]]",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(["*made no call through the asyncio API*"])
    result.stdout.fnmatch_lines(["*made no call through the blocking API*"])
    assert "test_measures_the_blocking_api[asyncio]" not in result.stdout.str()


ENTRY_POINTS = {"run", "run_result", "arun", "arun_result", "submit", "asubmit", "status", "astatus"}
ENTRY_POINTS |= {"Worker", "AsyncWorker"}


def test_conformance_modules_reach_the_apis_through_the_fixture_or_by_their_full_name() -> None:
    """A bare ``run`` imported into a conformance module would run the blocking API under an
    ``asyncio`` id; a call that must be blocking (inside a step body) is spelled ``idemflow.run``."""
    imported = {
        f"{path.name}: {alias.name}"
        for path in sorted(Path(__file__).parent.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("idemflow")
        for alias in node.names
        if alias.name in ENTRY_POINTS
    }
    assert imported == set()
