"""Shared fixtures: real servers for the session and one ``store`` fixture
parametrized over every backend, so the conformance suite runs unchanged on all.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Before idemflow's stores are imported: botocore checks every request idemflow builds here
# (off in production, where it costs CPU on every call).
os.environ.setdefault("IDEMFLOW_VALIDATE_REQUESTS", "1")

from idemflow.keys import RUNS_TABLE
from idemflow.stores import MemoryStore, SqliteStore, Store
from tests.selection import (  # noqa: F401 - the hooks and the server guard apply by being here
    _servers_only_under_the_cloud_marker,
    kinds,
    pytest_addoption,
    pytest_collection_modifyitems,
)
from tests.servers import (
    Azurite,
    DynamoDBLocal,
    Moto,
    azurite_server,
    dynamodb_local_server,
    moto_server,
)

pytest_plugins = ["idemflow.testing.plugin", "pytester"]

STORE_KINDS = ("memory", "sqlite", "dynamodb", "dynamodb-local", "azure")
CLOUD_KINDS = ("dynamodb", "dynamodb-local", "azure")
CONFLICT_RATE = 0.05
"""How often a DynamoDB Local call meets a phantom transaction (besides the real overlaps)."""
TEST_TABLES = ("accounts", "ledger", "tablea", "tableb", "items")
"""Logical tables the suite uses; cloud stores need them created up front."""

StoreFactory = Callable[[], Store]


@pytest.fixture(scope="session")
def moto() -> Iterator[Moto]:
    with moto_server() as server:
        yield server


@pytest.fixture(scope="session")
def dynamodb_local() -> Iterator[DynamoDBLocal]:
    with dynamodb_local_server() as server:
        yield server


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with azurite_server() as server:
        yield server


_counter = itertools.count()


def _prefix() -> str:
    # Letters and digits only (Azure table names); unique per store namespace.
    return f"t{uuid.uuid4().hex[:8]}{next(_counter)}"


def make_factory(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A function creating fresh, empty stores of ``kind`` (own tables each time)."""
    created: list[Store] = []

    def factory() -> Store:
        store: Store
        if kind == "memory":
            store = MemoryStore()
        elif kind == "sqlite":
            store = SqliteStore(tmp_path / f"{_prefix()}.sqlite3")
        elif kind == "dynamodb":
            from idemflow.stores.dynamodb import DynamoDBStore

            server: Moto = request.getfixturevalue("moto")
            store = DynamoDBStore(endpoint_url=server.endpoint, region_name=server.region, prefix=_prefix())
        elif kind == "dynamodb-local":
            rate = 0.0 if request.node.get_closest_marker("exact_calls") else CONFLICT_RATE
            store = dynamodb_local_store(request.getfixturevalue("dynamodb_local"), _prefix(), rate)
        elif kind == "azure":
            from idemflow.stores.azure_tables import AzureTableStore

            azure: Azurite = request.getfixturevalue("azurite")
            store = AzureTableStore(connection_string=azure.connection_string, prefix=_prefix())
        else:  # pragma: no cover
            raise ValueError(kind)
        store.create_tables(*TEST_TABLES)
        created.append(store)
        return store

    request.addfinalizer(lambda: [store.close() for store in created])
    return factory


def dynamodb_local_store(server: DynamoDBLocal, prefix: str, phantom_rate: float = CONFLICT_RATE) -> Store:
    """A DynamoDB store on DynamoDB Local, meeting the service's transaction conflicts:
    those of overlapping calls, and phantom ones at ``phantom_rate``."""
    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.testing.conflicts import DynamoDBConflicts

    store = DynamoDBStore(endpoint_url=server.endpoint, region_name=server.region, prefix=prefix)
    DynamoDBConflicts(store.client, phantom_rate=phantom_rate).install()
    return store


def dynamodb_url(kind: str, request: pytest.FixtureRequest, prefix: str) -> str:
    """A store URL for other processes: on moto (``dynamodb``), or on DynamoDB Local with every
    process meeting the service's transaction conflicts (``dynamodb-local``)."""
    if kind == "dynamodb":
        moto: Moto = request.getfixturevalue("moto")
        return f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix={prefix}"
    local: DynamoDBLocal = request.getfixturevalue("dynamodb_local")
    return (
        f"dynamodb:?endpoint={local.endpoint}&region={local.region}&prefix={prefix}&conflicts={CONFLICT_RATE}"
    )


@pytest.fixture(params=kinds(*STORE_KINDS))
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
    "CLOUD_KINDS",
    "CONFLICT_RATE",
    "RUNS_TABLE",
    "STORE_KINDS",
    "TEST_TABLES",
    "StoreFactory",
    "dynamodb_local_store",
    "dynamodb_url",
    "make_factory",
]
