"""AsyncAzureTableStore against a real Azurite: the whole store contract, and what only it has.

The contract (``tests/conformance/test_store_contract.py``) is imported and run
unchanged: its ``store`` fixture is overridden here by a blocking facade
(:class:`tests.support.blocking.Blocking`) over the asynchronous twin of an
``AzureTableStore`` on the same prefix (which answers ``scan``, ``tables`` and
``create_tables``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemflow.errors import ConfigurationError, TransientError
from idemflow.serialization import encode
from idemflow.stores.azure_tables import AzureTableStore
from idemflow.stores.azure_tables_async import AsyncAzureTableStore
from idemflow.stores.base import Committed, Increment, Insert, RowRef
from idemflow.testing.servers import Azurite
from tests.conformance.test_store_contract import *  # noqa: F403 - the contract, run on the async store
from tests.conformance.test_store_contract import put
from tests.conftest import TEST_TABLES, make_factory
from tests.support.blocking import Blocking

pytestmark = [pytest.mark.cloud, pytest.mark.exact_calls]  # type: ignore[assignment]


def at(key: str, partition: str = "p1", table: str = "accounts") -> RowRef:
    return RowRef(table, partition, key)


@pytest.fixture
def sync_store(azurite: Azurite, request: pytest.FixtureRequest, tmp_path: Path) -> AzureTableStore:
    made = make_factory("azure", request, tmp_path)()
    assert isinstance(made, AzureTableStore)
    return made


@pytest.fixture
def store(sync_store: AzureTableStore) -> Iterator[Blocking]:
    blocking = Blocking(AsyncAzureTableStore.twin_of(sync_store), sync_store)
    yield blocking
    blocking.close()


def test_twin_has_the_same_prefix_and_options(azurite: Azurite) -> None:
    prefix = f"w{uuid.uuid4().hex[:8]}"
    sync = AzureTableStore(connection_string=azurite.connection_string, prefix=prefix, retry_total=1)
    try:
        twin = AsyncAzureTableStore.twin_of(sync)
        assert twin.prefix == prefix and twin.capabilities == sync.capabilities
        assert sync._client_options == {"retry_total": 1}
        sync.create_tables("accounts")
        sync.commit([put(at("dshared"), "from sync")])

        async def scenario() -> None:
            try:
                row = await twin.read(at("dshared"))
                assert row is not None and row.value == "from sync"
            finally:
                await twin.close()

        asyncio.run(scenario())
    finally:
        sync.close()


def test_bad_prefix_and_connection_string_are_config_errors() -> None:
    with pytest.raises(ConfigurationError, match="prefix"):
        AsyncAzureTableStore(connection_string="UseDevelopmentStorage=true", prefix="a-b")
    with pytest.raises(ConfigurationError, match="malformed") as caught:
        AsyncAzureTableStore(connection_string="AccountKey=s3cret;nonsense")
    assert "s3cret" not in str(caught.value)


def test_connection_refused_is_transient_and_fast(azurite: Azurite) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens
    connection_string = azurite.connection_string.replace(str(azurite.table_port), str(port))

    async def scenario() -> None:
        store = AsyncAzureTableStore(
            connection_string=connection_string,
            prefix=f"x{uuid.uuid4().hex[:10]}",
            retry_total=0,
            connection_timeout=2,
            read_timeout=2,
        )
        try:
            with pytest.raises(TransientError):
                await store.read(at("da"))
            with pytest.raises(TransientError):
                await store.commit([put(at("da"), 1)])
            with pytest.raises(TransientError):
                await store.read_many([at("da"), at("db", "p2")])
        finally:
            await store.close()

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 10


def test_commit_cache_returns_at_once_and_flush_lands_the_row(sync_store: AzureTableStore) -> None:
    r = at("rcache", table="idemflowruns")

    async def scenario() -> None:
        store = AsyncAzureTableStore.twin_of(sync_store)
        try:
            for n in range(3):
                await store.commit_cache([put(r, {"n": n})])  # in order per row
            await store.flush()
            row = await store.read(r)
            assert row is not None and row.value == {"n": 2}
        finally:
            await store.close()

    asyncio.run(scenario())
    row = sync_store.read(r)
    assert row is not None and row.value == {"n": 2}


def test_commits_start_the_expiry_sweep_as_a_task(sync_store: AzureTableStore) -> None:
    """The asynchronous store sweeps as the blocking one does (the same queries and rules), as a
    task its commit starts when due; flush waits for it."""
    orphan, data = at("mwf|gone|s1", table="items"), at("dk", table="items")
    memo = {"id": "atomic a", "v": 1}

    async def scenario() -> None:
        store = AsyncAzureTableStore.twin_of(sync_store)
        try:
            await store.commit([Insert(orphan, memo, encode(memo), expires_at=100.0)])
            assert await store.read(orphan) is not None  # not due: the default is once a minute
            store.schedule_expiry(0.0, clock=lambda: 1e9)
            await store.commit([put(data, 1)])
            await store.flush()
            assert await store.read(orphan) is None and await store.read(data) is not None
            assert "items" in await store.tables()
        finally:
            await store.close()

    asyncio.run(scenario())


def test_close_is_idempotent_and_later_cache_writes_are_dropped(
    sync_store: AzureTableStore, caplog: pytest.LogCaptureFixture
) -> None:
    r = at("rlate", table="idemflowruns")

    async def scenario() -> None:
        store = AsyncAzureTableStore.twin_of(sync_store)
        await store.commit_cache([put(r, "queued before close")])
        await store.close()  # finishes the write under way
        await store.close()
        with caplog.at_level(logging.WARNING, logger="idemflow.stores.azure_tables"):
            await store.commit_cache([put(r, "after close")])  # dropped, never raises
        await store.flush()

    asyncio.run(scenario())
    assert "dropped a cache write" in caplog.text
    row = sync_store.read(r)
    assert row is not None and row.value == "queued before close"


def test_cache_write_to_a_missing_table_is_logged_not_raised(
    azurite: Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        store = AsyncAzureTableStore(connection_string=azurite.connection_string, prefix="nothere")
        with caplog.at_level(logging.WARNING, logger="idemflow.stores.azure_tables"):
            await store.commit_cache([put(at("rx", table="idemflowruns"), 1)])
            await store.flush()
        await store.close()

    asyncio.run(scenario())
    assert "dropped a cache write" in caplog.text and "does not exist" in caplog.text


def test_concurrent_increments_on_the_loop_all_land(sync_store: AzureTableStore) -> None:
    """Increments race on one row: each re-reads and retries (awaiting its pause) until it lands."""
    counter = at("dcount")

    async def scenario() -> None:
        store = AsyncAzureTableStore.twin_of(sync_store)
        try:
            outcomes = await asyncio.gather(*(store.commit([Increment(counter, 1)]) for _ in range(8)))
            assert outcomes == [Committed()] * 8
            rows = await store.read_many([counter, at("dnone"), at("dother", "p2")])
            assert rows[0] is not None and rows[0].value == 8 and rows[1:] == [None, None]
        finally:
            await store.close()

    asyncio.run(scenario())


def test_contract_is_collected_here() -> None:
    from tests.conformance import test_store_contract as contract

    names = {name for name in vars(contract) if name.startswith("test_")}
    assert names and names <= set(globals())
    assert set(TEST_TABLES) >= {"accounts", "ledger"}
