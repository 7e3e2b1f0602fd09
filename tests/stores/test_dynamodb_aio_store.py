"""AsyncDynamoDBStore against moto server and DynamoDB Local.

The whole store contract (``tests/conformance/test_store_contract.py``) runs
against the asynchronous store through a blocking facade (:class:`tests.support.blocking.Blocking`);
the tests below cover what is its own: errors of an unreachable endpoint,
cache writes as tasks, closing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemflow.errors import BackendError, ConfigurationError, TransientError
from idemflow.serialization import encode
from idemflow.stores.base import Committed, Conflict, Insert, Put, RowRef
from idemflow.stores.dynamodb import DynamoDBStore
from idemflow.stores.dynamodb_async import AsyncDynamoDBStore
from idemflow.testing.servers import Moto, free_port
from tests import conformance
from tests.conformance.test_store_contract import *  # noqa: F403 - the contract, run on this module's store
from tests.conftest import make_factory
from tests.support.blocking import Blocking
from tests.support.selection import kinds

pytestmark = [pytest.mark.cloud, pytest.mark.exact_calls]


@pytest.fixture(params=kinds("dynamodb", "dynamodb-local"))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Blocking]:
    """The contract's store: an AsyncDynamoDBStore behind a blocking facade."""
    sync = make_factory(request.param, request, tmp_path)()
    assert isinstance(sync, DynamoDBStore)
    facade = Blocking(AsyncDynamoDBStore.twin_of(sync), sync)
    yield facade
    facade.close()


@pytest.fixture
def sync_store(moto: Moto, request: pytest.FixtureRequest, tmp_path: Path) -> DynamoDBStore:
    made = make_factory("dynamodb", request, tmp_path)()
    assert isinstance(made, DynamoDBStore)
    return made


def test_every_contract_test_runs_here() -> None:
    contract = conformance.test_store_contract
    names = {name for name in vars(contract) if name.startswith("test_")}
    assert names and names <= set(globals())
    assert all(globals()[name] is getattr(contract, name) for name in names)


def test_twin_reaches_the_same_tables(sync_store: DynamoDBStore) -> None:
    twin = AsyncDynamoDBStore.twin_of(sync_store)
    assert twin.url == sync_store.url and twin.prefix == sync_store.prefix
    r = RowRef("accounts", "p1", "twin")
    sync_store.commit([Put(r, 5, encode(5))])

    async def main() -> None:
        row = await twin.read(r)
        assert row is not None and row.value == 5
        found = await twin.commit([Insert(r, 6, encode(6))])
        assert isinstance(found, Conflict) and found.failures[0].existing == row
        assert "accounts" in await twin.tables()
        assert [(p, k, got.value) for p, k, got in await twin.scan("accounts")] == [("p1", "twin", 5)]
        await twin.close()

    asyncio.run(main())


def test_unreachable_endpoint_is_transient() -> None:
    store = AsyncDynamoDBStore(endpoint_url=f"http://127.0.0.1:{free_port()}", region_name="us-east-1")
    r = RowRef("accounts", "p1", "k")

    async def main() -> None:
        with pytest.raises(TransientError, match="DynamoDB read on accounts failed, worth retrying"):
            await store.read(r)
        with pytest.raises(TransientError, match="DynamoDB commit on accounts failed"):
            await store.commit([Put(r, 1, encode(1))])
        await store.close()

    asyncio.run(main())


def test_missing_table_names_the_fix(moto: Moto) -> None:
    store = AsyncDynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix="nosuchaio")

    async def main() -> None:
        with pytest.raises(BackendError, match="nosuchaioaccounts: table not found") as caught:
            await store.read(RowRef("accounts", "p1", "k"))
        assert store.url in str(caught.value)
        await store.close()

    asyncio.run(main())


def test_no_region_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ConfigurationError, match="give a region"):
        AsyncDynamoDBStore()


def test_commit_cache_does_not_wait_and_flush_lands_the_row(sync_store: DynamoDBStore) -> None:
    twin = AsyncDynamoDBStore.twin_of(sync_store)
    rows = [RowRef("idemflowruns", "req", f"r{n}") for n in range(5)]

    async def main() -> None:
        for n, r in enumerate(rows):
            await twin.commit_cache([Put(r, {"n": n}, encode({"n": n}))])
        same = rows[0]  # writes of one row apply in the order they were started
        for n in range(10, 15):
            await twin.commit_cache([Put(same, n, encode(n))])
        await twin.flush()
        assert not twin._cache.pending
        found = await twin.read_many(rows)
        assert [row.value if row else None for row in found] == [14, *({"n": n} for n in range(1, 5))]
        await twin.close()

    asyncio.run(main())
    row = sync_store.read(rows[1])
    assert row is not None and row.value == {"n": 1}


def test_a_failing_cache_write_is_logged_not_raised(
    sync_store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    twin = AsyncDynamoDBStore(endpoint_url=sync_store.client.meta.endpoint_url, prefix="nosuchcache")

    async def main() -> None:
        with caplog.at_level("WARNING", logger="idemflow.stores.dynamodb"):
            await twin.commit_cache([Put(RowRef("idemflowruns", "req", "r"), 1, encode(1))])
            await twin.close()

    asyncio.run(main())
    assert "dropped a cache write (dynamodb, 1 operations)" in caplog.text


def test_close_is_idempotent_and_a_closed_store_refuses_calls(sync_store: DynamoDBStore) -> None:
    twin = AsyncDynamoDBStore.twin_of(sync_store)
    r = RowRef("accounts", "p1", "closing")

    async def main() -> None:
        assert isinstance(await twin.commit([]), Committed)  # no call: no client
        await twin.close()  # never used: nothing to close
        await twin.commit_cache([Put(r, 1, encode(1))])  # dropped: closed
        await twin.close()
        await twin.close()
        assert twin.client is None
        with pytest.raises(BackendError, match="closed"):
            await twin.read(r)

    asyncio.run(main())
    assert sync_store.read(r) is None

    used = AsyncDynamoDBStore.twin_of(sync_store)

    async def use_then_close() -> None:
        assert await used.read(r) is None
        assert used.client is not None
        await used.close()
        await used.close()
        assert used.client is None

    asyncio.run(use_then_close())
