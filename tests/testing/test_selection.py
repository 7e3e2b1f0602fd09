"""``--backends=``, ``-m "not cloud"`` and strict xfails select what they say (tests/support/selection.py)."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest

from tests.support.selection import (  # noqa: F401
    _servers_only_under_the_cloud_marker,
    kinds,
    pytest_addoption,
    pytest_collection_modifyitems,
)


def pytest_configure(config):
    config.addinivalue_line("markers", "cloud: needs a server")
    config.addinivalue_line("markers", "backend(kind): runs on that backend")


@pytest.fixture(scope="session")
def moto():
    return "a server"


@pytest.fixture(scope="session")
def azurite():
    return "a server"
"""

TESTS = """
import pytest

from tests.support.selection import kinds


@pytest.fixture(params=kinds("memory", "sqlite", "dynamodb", "azure"))
def store_kind(request):
    return request.param


def test_on_every_kind(store_kind):
    pass


@pytest.mark.parametrize("kind", kinds("sqlite", "sqs"))
def test_on_queues(kind):
    pass


def test_takes_a_server(azurite):
    pass


def test_plain():
    pass
"""


def outcome(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kinds=TESTS)
    return pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-q", *args)


def collected(result: pytest.RunResult) -> set[str]:
    return {line.split("::", 1)[1] for line in result.outlines if line.startswith("test_kinds.py::")}


LOCAL = {
    "test_on_every_kind[memory]",
    "test_on_every_kind[sqlite]",
    "test_on_queues[sqlite]",
    "test_plain",
}


def test_not_cloud_leaves_every_case_that_needs_a_server_out(pytester: pytest.Pytester) -> None:
    assert collected(outcome(pytester, "--collect-only", "-m", "not cloud")) == LOCAL


def test_backends_selects_by_kind_and_by_the_server_a_test_takes(pytester: pytest.Pytester) -> None:
    assert collected(outcome(pytester, "--collect-only", "--backends=memory,sqlite")) == LOCAL
    assert collected(outcome(pytester, "--collect-only", "--backends=memory,azure")) == {
        "test_on_every_kind[memory]",
        "test_on_every_kind[azure]",
        "test_takes_a_server",
        "test_plain",
    }
    assert len(collected(outcome(pytester, "--collect-only"))) == 8  # default: everything


def test_an_unknown_backend_is_refused(pytester: pytest.Pytester) -> None:
    result = outcome(pytester, "--collect-only", "--backends=memory,cassandra")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--backends*cassandra*known: memory, sqlite*"])


def test_a_server_reached_without_the_cloud_marker_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_sneaky="""
        import pytest

        def test_sneaks_a_server(request):
            assert request.getfixturevalue("moto") == "a server"

        @pytest.mark.cloud
        def test_says_it_needs_one(request):
            assert request.getfixturevalue("moto") == "a server"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_sneaks_a_server reached moto without the cloud marker*"])


def test_a_strict_xfail_must_name_what_it_expects(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_xfails="""
        import pytest

        @pytest.mark.xfail(strict=True, raises=KeyError, reason="named")
        def test_named():
            raise KeyError("k")

        @pytest.mark.xfail(strict=True, reason="anything would do")
        def test_loose():
            raise KeyError("k")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*xfail(strict=True) without raises=: test_xfails.py::test_loose"])
