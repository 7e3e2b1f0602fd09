"""What a run selects, said by markers: ``--backends=``, ``-m "not cloud"``, strict xfails.

Every parametrized backend kind is a :func:`kinds` parameter, marked
``backend(kind)`` and, when it needs a server, ``cloud``; a test that takes a
server fixture (``moto``, ``dynamodb_local``, ``azurite``) is marked the same at
collection. So ``-m "not cloud"`` deselects every case that would start a
server, and ``--backends=memory,sqlite`` every case of another backend. A test
that reaches a server without the ``cloud`` marker (through
``request.getfixturevalue``, which collection cannot see) fails, so a new one
cannot slip into ``-m "not cloud"`` runs. A ``xfail(strict=True)`` must name the
exception it expects (``raises=``): otherwise any error, an ``ImportError`` of
a renamed module included, would count as the expected failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _pytest.mark.structures import MarkDecorator, ParameterSet

SERVERS = {"moto": ("dynamodb", "sqs"), "dynamodb_local": ("dynamodb-local",), "azurite": ("azure",)}
"""Server fixtures, and the backends each one serves."""


def known_backends() -> tuple[str, ...]:
    """What ``--backends`` accepts: every registered store and queue test bed's kind (read when
    asked, so a backend a plugin registers is known too)."""
    from idemflow.async_worklist.queues.registry import QUEUES
    from idemflow.stores.registry import STORES

    return tuple(dict.fromkeys([*STORES.kinds(), *QUEUES.kinds()]))


def cloud_backends() -> frozenset[str]:
    """The kinds whose test beds start a server (moto, DynamoDB Local, Azurite)."""
    from idemflow.async_worklist.queues.registry import QUEUES
    from idemflow.stores.registry import STORES, Feature

    return frozenset([*STORES.kinds(Feature.SERVER), *QUEUES.kinds(Feature.SERVER)])


def backend_marks(kind: str) -> list[MarkDecorator]:
    """The marks of a case on ``kind``: ``backend(kind)``, and ``cloud`` if it needs a server."""
    marks = [pytest.mark.backend(kind)]
    if kind in cloud_backends():
        marks.append(pytest.mark.cloud)
    return marks


def kinds(*names: str) -> list[ParameterSet]:
    """Parameters over backend kinds, each carrying its marks (ids stay the kind's name)."""
    known = known_backends()
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown backend kind(s) {unknown}; known: {', '.join(known)}")
    return [pytest.param(name, marks=backend_marks(name)) for name in names]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default="",
        help="comma-separated backends to run cases of (default: every registered one)",
    )


def selected_backends(config: pytest.Config) -> frozenset[str]:
    known = known_backends()
    given = str(config.getoption("--backends"))
    names = [name.strip() for name in given.split(",") if name.strip()] if given else list(known)
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        raise pytest.UsageError(f"--backends: unknown or no backend {unknown}; known: {', '.join(known)}")
    return frozenset(names)


def _servers(item: pytest.Item) -> set[str]:
    """The server fixtures ``item`` takes, directly or through other fixtures."""
    return SERVERS.keys() & set(getattr(item, "fixturenames", ()))


def _selected(item: pytest.Item, chosen: frozenset[str], cloud: bool) -> bool:
    """Whether ``item`` runs when ``chosen`` backends are (``cloud``: one of them needs a server)."""
    if {str(mark.args[0]) for mark in item.iter_markers("backend")} - chosen:
        return False
    if any(chosen.isdisjoint(SERVERS[server]) for server in _servers(item)):
        return False
    return item.get_closest_marker("cloud") is None or cloud


def _loose_xfails(items: list[pytest.Item]) -> list[str]:
    return sorted(
        {
            item.nodeid.split("[")[0]
            for item in items
            for mark in item.iter_markers("xfail")
            if mark.kwargs.get("strict") and "raises" not in mark.kwargs
        }
    )


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    loose = _loose_xfails(items)
    if loose:
        raise pytest.UsageError(f"xfail(strict=True) without raises=: {', '.join(loose)}")
    for item in items:
        if item.get_closest_marker("cloud") is None and SERVERS.keys() & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.cloud)
    chosen = selected_backends(config)
    cloud = not chosen.isdisjoint(cloud_backends())  # the registries read once, not per item
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if _selected(item, chosen, cloud) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The slow cases first (a stable sort): handed out before the many short ones, they end while
    # the short ones fill the other workers, instead of one worker running a chaos run alone at the end.
    items[:] = sorted(kept, key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _servers_only_under_the_cloud_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reached = sorted(SERVERS.keys() & set(request.fixturenames))
    if reached and request.node.get_closest_marker("cloud") is None:
        pytest.fail(
            f"{request.node.nodeid} reached {', '.join(reached)} without the cloud marker, so"
            ' -m "not cloud" would start a server: parametrize it with tests.support.selection.kinds()'
            " or mark it cloud",
            pytrace=False,
        )


__all__ = [
    "SERVERS",
    "backend_marks",
    "cloud_backends",
    "kinds",
    "known_backends",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "selected_backends",
]
