"""Shared fixtures: real servers for the session and one ``store`` fixture
parametrized over every backend, so the conformance suite runs unchanged on all.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Before idemflow's stores are imported: botocore checks every request idemflow builds here
# (off in production, where it costs CPU on every call).
os.environ.setdefault("IDEMFLOW_VALIDATE_REQUESTS", "1")

from idemflow import open_store
from idemflow.async_worklist.queues.registry import QUEUES
from idemflow.keys import RUNS_TABLE
from idemflow.stores import Store
from idemflow.stores.registry import STORES, Feature
from idemflow.testing.servers import CONFLICT_RATE, Azurite, DynamoDBLocal, Moto, ServerPool
from tests.support.selection import (  # noqa: F401 - the hooks and the server guard apply by being here
    _servers_only_under_the_cloud_marker,
    backend_marks,
    pytest_addoption,
    pytest_collection_modifyitems,
)

pytest_plugins = ["idemflow.testing.plugin", "pytester"]

TEST_TABLES = ("accounts", "ledger", "tablea", "tableb", "items")
"""Logical tables the suite uses; cloud stores need them created up front."""

StoreFactory = Callable[[], Store]


@pytest.fixture(scope="session")
def backend_servers(idemflow_servers: ServerPool) -> ServerPool:
    """Every test bed's server, started on first use and stopped at the end of the session
    (the plugin's fixture, as users' suites get it)."""
    return idemflow_servers


def _server(request: pytest.FixtureRequest, kind: str) -> Any:
    _, bed = STORES.bed(kind)
    case = request.node  # the session, for the session's server fixtures (their cases are marked by name)
    if (
        Feature.SERVER in bed.features
        and isinstance(case, pytest.Item)
        and case.get_closest_marker("cloud") is None
    ):
        pytest.fail(
            f"{case.nodeid} asks for the {kind} server without the cloud marker, so"
            ' -m "not cloud" would start it: parametrize it with tests.support.selection.kinds()',
            pytrace=False,
        )
    pool: ServerPool = request.getfixturevalue("backend_servers")
    return pool.get(bed.server)


@pytest.fixture(scope="session")
def moto(request: pytest.FixtureRequest) -> Moto:
    return _server(request, "dynamodb")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def dynamodb_local(request: pytest.FixtureRequest) -> DynamoDBLocal:
    return _server(request, "dynamodb-local")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def azurite(request: pytest.FixtureRequest) -> Azurite:
    return _server(request, "azure")  # type: ignore[no-any-return]


_counter = itertools.count()


def _prefix() -> str:
    # Letters and digits only (Azure table names); unique per store namespace.
    return f"t{uuid.uuid4().hex[:8]}{next(_counter)}"


def store_url(
    kind: str,
    request: pytest.FixtureRequest,
    prefix: str,
    folder: Path | None = None,
    *,
    exact: bool | None = None,
) -> str:
    """A URL of a fresh store of test bed ``kind`` (own tables: ``prefix``), for this process or
    others; ``exact`` (default: the test's ``exact_calls`` mark) injects no phantom conflicts."""
    if exact is None:
        exact = request.node.get_closest_marker("exact_calls") is not None
    where = folder if folder is not None else Path(request.getfixturevalue("tmp_path"))
    url: str = _server(request, kind).store_url(prefix, where, exact_calls=exact)
    return url


def paired_queue_url(
    kind: str, request: pytest.FixtureRequest, name: str, folder: Path, *, visibility_timeout: float
) -> str:
    """A queue URL for other processes beside a store of test bed ``kind``: on the same server
    where that serves queues (Azurite, moto, files), else on the first shared queue bed with a
    server (SQS on moto beside DynamoDB Local)."""
    _, store_bed = STORES.bed(kind)
    shared = [bed for _, bed in QUEUES.beds(Feature.SHARED)]
    same = [bed for bed in shared if bed.server == store_bed.server]
    bed = (same or [bed for bed in shared if Feature.SERVER in bed.features])[0]
    pool: ServerPool = request.getfixturevalue("backend_servers")
    url: str = pool.get(bed.server).queue_url(name, folder, visibility_timeout=visibility_timeout)
    return url


def make_factory(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A function creating fresh, empty stores of test bed ``kind`` (own tables each time)."""
    created: list[Store] = []

    def factory() -> Store:
        store = open_store(store_url(kind, request, _prefix(), tmp_path))
        store.create_tables(*TEST_TABLES)
        created.append(store)
        return store

    request.addfinalizer(lambda: [store.close() for store in created])
    return factory


def dynamodb_local_store(server: DynamoDBLocal, prefix: str, phantom_rate: float = CONFLICT_RATE) -> Store:
    """A DynamoDB store on DynamoDB Local, meeting the service's transaction conflicts:
    those of overlapping calls, and phantom ones at ``phantom_rate``."""
    return open_store(
        f"dynamodb:?endpoint={server.endpoint}&region={server.region}&prefix={prefix}&conflicts={phantom_rate}"
    )


def dynamodb_url(kind: str, request: pytest.FixtureRequest, prefix: str) -> str:
    """A store URL for other processes: on moto (``dynamodb``), or on DynamoDB Local with every
    process meeting the service's transaction conflicts (``dynamodb-local``)."""
    return store_url(kind, request, prefix, exact=False)


def store_kinds(*needs: Feature, without: tuple[Feature, ...] = (), every_bed: bool = False) -> list[Any]:
    """The registered store test beds as parameters, each marked ``backend(kind)`` and, needing a
    server, ``cloud`` (:mod:`tests.support.selection`). Beds for the store's own suites only
    (:attr:`Feature.STORE_SUITES`, moto beside DynamoDB Local) are left out unless ``every_bed``
    (the ``every_bed`` mark): a workflow suite runs each backend once, on its most faithful bed."""
    if not every_bed and Feature.STORE_SUITES not in needs:
        without = (*without, Feature.STORE_SUITES)
    return [
        pytest.param(bed.kind, marks=backend_marks(bed.kind), id=bed.kind)
        for _, bed in STORES.beds(*needs, without=without)
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every registered store backend, read when tests are collected: a backend registered by a
    # plugin (pytest -p) or an earlier conftest is picked up with no edit here.
    if "store_kind" in metafunc.fixturenames:
        every_bed = metafunc.definition.get_closest_marker("every_bed") is not None
        metafunc.parametrize("store_kind", store_kinds(every_bed=every_bed), indirect=True)


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    return make_factory(store_kind, request, tmp_path)


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory()


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester whose runs import this repository's ``tests`` package: they start in a temporary
    folder, where ``make test`` (no PYTHONPATH) would not find it."""
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return pytester


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis: deterministic in CI, no per-example deadline (real servers vary).
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "idemflow",
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=os.environ.get("CI") == "true",
    )
    settings.load_profile("idemflow")


__all__ = [
    "CONFLICT_RATE",
    "RUNS_TABLE",
    "TEST_TABLES",
    "StoreFactory",
    "dynamodb_local_store",
    "dynamodb_url",
    "make_factory",
    "paired_queue_url",
    "store_kinds",
    "store_url",
]
