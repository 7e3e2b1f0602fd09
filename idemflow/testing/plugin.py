"""pytest plugin: the ``idemflow_check`` fixture, :func:`~idemflow.testing.check_workflow` as an assertion.

Why a fixture: a workflow's crash-safety is a property of *your* code (how it
passes data between steps, where it reads the clock), so it belongs in your
test suite, next to the workflow, failing with a trace you can read.

Enable it in your top-level ``conftest.py``::

    pytest_plugins = ["idemflow.testing.plugin"]

then, in a test::

    def test_transfer_survives_crashes(idemflow_check):
        idemflow_check(transfer, [{"src": "a", "dst": "b", "amount": 5}], setup=open_accounts)

The check runs on a fresh :class:`~idemflow.stores.MemoryStore` per scenario, or on
SQLite files with ``pytest --idemflow-store=sqlite``; pass ``store_factory=``
to use another store (a cloud store against its emulator, say: the
``idemflow_servers`` fixture starts moto, Azurite or DynamoDB Local for the
session and gives a store URL on them).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from idemflow.engine.monad import Idem
from idemflow.stores.base import Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.sqlite import SqliteStore
from idemflow.testing._shared_servers import WORKER_INPUT, ServerBroker, SharedServerPool
from idemflow.testing.check import check_workflow
from idemflow.testing.report import CheckReport
from idemflow.testing.servers import ServerPool

STORE_OPTION = "--idemflow-store"


class IdemflowCheck:
    """What the ``idemflow_check`` fixture gives: call it like :func:`check_workflow`;
    it returns the report, or fails the test with the trace of the first divergence.

    >>> from idemflow import atomic, workflow
    >>> @workflow("ping")
    ... def ping(who):
    ...     yield atomic("pings", who, lambda tx: tx.increment("count"))
    >>> IdemflowCheck(MemoryStore)(ping, ["ann"]).ok
    True
    """

    def __init__(self, store_factory: Callable[[], Store]) -> None:
        self.store_factory = store_factory

    def __call__(
        self,
        wf: Callable[[Any], Idem[Any]],
        inputs: Iterable[object],
        *,
        store_factory: Callable[[], Store] | None = None,
        **options: Any,
    ) -> CheckReport:
        """Check ``wf`` on ``inputs``; raise ``AssertionError`` with the trace if it diverges."""
        report = check_workflow(wf, inputs, store_factory or self.store_factory, **options)
        report.raise_on_failure()
        return report


def sqlite_factory(directory: Path) -> Callable[[], Store]:
    """Fresh SQLite stores, one new file in ``directory`` per call.

    >>> import tempfile
    >>> make = sqlite_factory(Path(tempfile.mkdtemp()))
    >>> type(make()).__name__
    'SqliteStore'
    """
    numbers = itertools.count()
    return lambda: SqliteStore(directory / f"check-{next(numbers)}.sqlite3")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--idemflow-store=memory|sqlite``: the store ``idemflow_check`` uses by default."""
    parser.addoption(
        STORE_OPTION,
        choices=("memory", "sqlite"),
        default="memory",
        help="store for the idemflow_check fixture (default: memory)",
    )


_BROKER = pytest.StashKey[ServerBroker]()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, on the controller: absent without it
def pytest_configure_node(node: Any) -> None:
    """Under ``pytest -n N`` the controller starts the servers every worker shares
    (:mod:`idemflow.testing._shared_servers`); each worker learns where to ask for them."""
    config: pytest.Config = node.config
    if _BROKER not in config.stash:
        config.stash[_BROKER] = ServerBroker(Path(tempfile.mkdtemp(prefix="idemflow-servers-")))
    node.workerinput[WORKER_INPUT] = str(config.stash[_BROKER].folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the shared servers once every worker has ended."""
    broker = config.stash.get(_BROKER, None)
    if broker is not None:
        broker.close()
        shutil.rmtree(broker.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def idemflow_servers(request: pytest.FixtureRequest) -> Iterator[ServerPool]:
    """The backend servers of the registries' test beds (moto, Azurite, DynamoDB Local,
    PostgreSQL), each started on first use and stopped at the end of the session; under
    pytest-xdist, DynamoDB Local, Azurite and PostgreSQL are started once for all workers::

        def test_on_azurite(idemflow_servers, tmp_path):
            _, bed = STORES.bed("azure")
            url = idemflow_servers.get(bed.server).store_url("t1", tmp_path)
            store = open_store(url)
    """
    folder = getattr(request.config, "workerinput", {}).get(WORKER_INPUT)
    with SharedServerPool(Path(folder)) if folder else ServerPool() as pool:
        yield pool


@pytest.fixture
def idemflow_check(request: pytest.FixtureRequest, tmp_path: Path) -> IdemflowCheck:
    """Check a workflow under every crash point, duplicate and conflict; fail with a trace."""
    kind = request.config.getoption(STORE_OPTION, default="memory")
    factory: Callable[[], Store] = MemoryStore if kind == "memory" else sqlite_factory(tmp_path)
    return IdemflowCheck(factory)


__all__ = [
    "IdemflowCheck",
    "idemflow_check",
    "idemflow_servers",
    "pytest_addoption",
    "pytest_configure_node",
    "pytest_unconfigure",
    "sqlite_factory",
]
