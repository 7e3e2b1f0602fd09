"""What only the PostgreSQL store has to prove beyond the conformance suites (which run it on the
session's server like every backend): its typed errors for a refused login, a missing database
or schema and a lost connection (nothing half-written), a server restart mid-load losing
nothing, its key escaping and its URLs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from idemflow import RetryPolicy, atomic, open_async_store, open_store, run
from idemflow.errors import ConfigurationError, ErrorCode, TransientError
from idemflow.stores import AsyncPostgresStore, PostgresStore, async_twin
from idemflow.stores._postgres_sql import escaped, unescaped
from idemflow.stores.base import COMMITTED, Cond, Conflict, Increment, Insert, Op, Put, RowRef
from idemflow.stores.registry import STORES
from idemflow.testing import data_rows
from idemflow.testing.servers import PostgresServer, ServerPool, postgres_server

pytestmark = pytest.mark.cloud
WHERE = ("items", "p", "absent")


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> PostgresServer:
    _, bed = STORES.bed("postgres")
    pool: ServerPool = request.getfixturevalue("backend_servers")
    found: PostgresServer = pool.get(bed.server)
    return found


@pytest.fixture
def store(server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[PostgresStore]:
    made = open_store(server.store_url(f"own{abs(hash(request.node.nodeid)) % 10**8}", Path(".")))
    assert isinstance(made, PostgresStore)
    yield made
    made.close()


def test_a_role_that_does_not_exist_is_a_refused_login(server: PostgresServer) -> None:
    with pytest.raises(ConfigurationError) as raised:
        PostgresStore(f"postgresql://127.0.0.1:{server.port}/postgres?user=nobody")
    assert raised.value.code is ErrorCode.CREDENTIALS_REFUSED and raised.value.backend == "postgres"


def test_a_missing_database_is_not_found(server: PostgresServer) -> None:
    with pytest.raises(ConfigurationError) as raised:
        open_store(f"postgresql://127.0.0.1:{server.port}/nosuchdb?user=postgres")
    assert raised.value.code is ErrorCode.NOT_FOUND and raised.value.service_code == "3D000"


def test_a_missing_schema_is_not_found_unless_created(server: PostgresServer) -> None:
    with pytest.raises(ConfigurationError) as raised:
        open_store(server.store_url("nevermade", Path(".")), create=False)
    assert raised.value.code is ErrorCode.NOT_FOUND


def test_no_server_is_transient() -> None:
    with pytest.raises(TransientError):
        PostgresStore("postgresql://127.0.0.1:1/postgres?user=postgres&connect_timeout=2")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql:relative", "needs a server"),
        ("postgresql://h/db?pool_size=0", "pool_size"),
        ("postgresql://h/db?colour=red", "unknown parameter"),
    ],
)
def test_bad_urls_are_refused_before_connecting(url: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        open_store(url)


def test_a_connection_killed_mid_commit_leaves_nothing(store: PostgresStore, server: PostgresServer) -> None:
    held, wanted = RowRef("items", "p", "held"), RowRef("items", "p", "new")
    store.commit([Put(held, 1, "1")])
    with (
        psycopg.connect(server.conninfo, autocommit=True) as other,
        psycopg.connect(server.conninfo, autocommit=True) as watcher,  # sees pg_stat_activity live
    ):
        other.execute("BEGIN")
        other.execute(f"SELECT 1 FROM {store.sql.schema_table} WHERE rk = 'held' FOR UPDATE")
        failed: list[BaseException] = []

        def commit() -> None:  # waits on the held row's lock, its new row already inserted
            try:
                store.commit([Insert(wanted, 2, "2"), Increment(held, 1)])
            except BaseException as exc:  # noqa: BLE001 - checked below
                failed.append(exc)

        thread = threading.Thread(target=commit)
        thread.start()
        # Only the backend our lock blocks: the server is shared with other workers' cases.
        waiting = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        holder = other.info.backend_pid
        while thread.is_alive() and not (pids := watcher.execute(waiting, (holder,)).fetchall()):
            thread.join(0.01)
        assert thread.is_alive(), failed  # the commit waits on the held row
        watcher.execute("SELECT pg_terminate_backend(%s)", pids[0])
        thread.join()
        other.execute("ROLLBACK")
    assert len(failed) == 1 and isinstance(failed[0], TransientError), failed
    assert store.read(wanted) is None
    row = store.read(held)
    assert row is not None and row.value == 1
    assert store.commit([Insert(wanted, 2, "2")]) == COMMITTED  # the pool replaced the connection


@pytest.mark.slow
def test_a_server_restart_mid_load_loses_nothing(tmp_path: Path) -> None:
    requests = 300
    with postgres_server() as private:
        store = open_store(private.store_url("restart", tmp_path))
        bump = atomic("items", "c", lambda tx: tx.put("count", (tx.get("count") or 0) + 1))
        started = threading.Barrier(4)
        loaded = threading.Event()
        after_restart: list[int] = []

        def load(first: int) -> None:
            started.wait()
            for i in range(first, requests, 3):
                if i > 30:
                    loaded.set()
                run(bump, request_id=f"r{i}", store=store, policy=RetryPolicy(retention=3600.0))
                if down.is_set():
                    after_restart.append(i)

        down = threading.Event()

        threads = [threading.Thread(target=load, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        started.wait()
        loaded.wait()
        private.stop("immediate")  # as a crash: recovery replays the WAL at the next start
        down.set()
        private.start()
        for thread in threads:
            thread.join()
        for i in range(requests):  # duplicates of every request: none runs again
            run(bump, request_id=f"r{i}", store=store, policy=RetryPolicy(retention=3600.0))
        rows = data_rows(store, "items")
        store.close()
    assert rows == {("items", "c", "count"): requests}
    assert after_restart  # the load went on across the restart


def test_names_postgres_cannot_hold_are_escaped_in_order() -> None:
    names = ["", "\x00", "\x00\x00", "\x01", "\x01\x00", "\x02", "a\x00b", "a\x01b", "ab"]
    assert [unescaped(escaped(name)) for name in names] == names
    assert sorted(names) == sorted(names, key=escaped)
    assert len({escaped(name) for name in names}) == len(names)


def test_a_failed_insert_reports_the_row_found(store: PostgresStore) -> None:
    memo = RowRef("items", "p", "mmemo")
    store.commit([Insert(memo, {"result": 7}, '{"result":7}')])
    outcome = store.commit(
        [Put(RowRef("items", "p", "aaa"), 1, "1", expect=Cond.ABSENT), Insert(memo, 8, "8")]
    )
    assert isinstance(outcome, Conflict)
    assert [(f.index, f.existing and f.existing.value) for f in outcome.failures] == [(1, {"result": 7})]


def test_the_asyncio_store_shares_the_blocking_one_s_rows(store: PostgresStore) -> None:
    ref = RowRef("items", "p", "k")

    async def both() -> None:
        twin = async_twin(store)
        assert isinstance(twin, AsyncPostgresStore)
        await twin.commit([Increment(ref, 2)])
        own = open_async_store(store.url)
        assert isinstance(own, AsyncPostgresStore)
        row = await own.read(ref)
        assert row is not None and row.value == 2
        await own.close()
        await twin.close()

    asyncio.run(both())
    row = store.read(ref)
    assert row is not None and row.value == 2


def test_a_check_that_a_row_is_absent_holds_the_key_until_its_commit_ends(
    store: PostgresStore, server: PostgresServer
) -> None:
    key = RowRef(*WHERE)
    sql = store.sql
    # The watcher is a connection of its own, outside any transaction: a transaction sees
    # pg_stat_activity as it was at its first look. It counts only the backends our held
    # transaction blocks (the server is shared with other workers' cases).
    with (
        psycopg.ClientCursor(psycopg.connect(server.conninfo, autocommit=True)) as other,
        psycopg.connect(server.conninfo, autocommit=True) as watcher,
    ):
        other.execute("BEGIN")  # a commit holding Check(key, ABSENT), stopped before its end
        other.execute(f"{sql.hold_absent}; {sql.release_absent}", (*WHERE, 0, *WHERE))
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(store.commit([Insert(key, 1, "1")])))
        thread.start()
        holder = other.connection.info.backend_pid
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        while thread.is_alive() and watcher.execute(waiting, (holder,)).fetchone() == (0,):
            thread.join(0.01)
        assert thread.is_alive() and store.read(key) is None  # the insert waits on the held key
        other.execute("COMMIT")
        thread.join()
        other.connection.close()
    assert done == [COMMITTED]
    row = store.read(key)
    assert row is not None and row.value == 1


def test_a_refused_commit_leaves_its_values_out_of_the_server_log(
    store: PostgresStore, server: PostgresServer
) -> None:
    """A condition not met is an answer of the commit function, not an error: PostgreSQL logs an
    error with its whole statement, which here would carry the rows' values (a customer's data)
    into the server's log at every duplicate and every conflict."""
    secret = f"secret-{abs(hash(store.schema))}"
    memo, counter, text = RowRef("items", "p", "mlog"), RowRef("items", "p", "n"), RowRef("items", "p", "t")
    assert store.commit([Insert(memo, secret, f'"{secret}"'), Put(text, "x", '"x"')]) is COMMITTED
    refused: list[list[Op]] = [
        [Insert(memo, secret, f'"{secret}"'), Put(RowRef("items", "p", "other"), secret, f'"{secret}"')],
        [Put(RowRef("items", "p", "stale"), secret, f'"{secret}"', expect=12345)],
        [Increment(text, 1), Insert(memo, secret, f'"{secret}"')],  # summed in Python: stepwise
    ]
    for ops in refused:
        outcome = store.commit(ops)
        assert isinstance(outcome, Conflict), ops
    found = store.commit([Increment(counter, 2**60), Insert(memo, secret, f'"{secret}"')])
    assert isinstance(found, Conflict) and found.failures[-1].existing is not None
    assert store.read(RowRef("items", "p", "other")) is None and store.read(counter) is None
    assert secret not in server.log.read_text(errors="replace")


def test_a_schema_made_before_the_commit_function_gets_it_when_opened(server: PostgresServer) -> None:
    schema = f"old{abs(hash(server.log)) % 10**6}"
    first = PostgresStore(server.conninfo, schema=schema)
    first.commit([Put(RowRef("items", "p", "k"), 1, "1")])
    first.close()
    with psycopg.connect(server.conninfo, autocommit=True) as conn:
        conn.execute(f'DROP FUNCTION "{schema}".idemflow_commit(text[], text[], text[], text[])')
    again = PostgresStore(server.conninfo, schema=schema, create=False)
    assert isinstance(again.commit([Insert(RowRef("items", "p", "k"), 2, "2")]), Conflict)
    assert again.commit([Increment(RowRef("items", "p", "k"), 2)]) is COMMITTED
    row = again.read(RowRef("items", "p", "k"))
    assert row is not None and row.value == 3
    again.close()


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_values_that_look_like_sql_come_back_as_written(server: PostgresServer, conforming: str) -> None:
    """A commit's statements are bound client-side: with ``standard_conforming_strings`` on (the
    default) by the store's own quoting, else by psycopg's, which knows the other escapes."""
    url = f"{server.conninfo}&options=-c%20standard_conforming_strings%3D{conforming}"
    store = PostgresStore(url, schema=f"quotes{conforming}")
    odd = ["it's", "\\'; DROP TABLE x; --", "100%s %% $$ $q$", "\\x00 \\\\", "é ✓ 𝄞", "-1", "''"]
    for n, value in enumerate(odd):
        text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        ref = RowRef("it's", f"p'{n}", f"k\\{value}")
        assert store.commit([Insert(ref, value, text), Increment(RowRef("items", "p", "n"), -3)]) is COMMITTED
        row = store.read(ref)
        assert row is not None and row.value == value
        assert isinstance(store.commit([Insert(ref, value, text)]), Conflict)
    total = store.read(RowRef("items", "p", "n"))
    assert total is not None and total.value == -3 * len(odd)
    store.close()
