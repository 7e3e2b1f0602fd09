"""DynamoDBStore against a real moto server: item layout, limits, errors, lost answers.

The shared contract lives in ``tests/conformance``; these tests cover what only
DynamoDB has (the ``n``/``v`` split, TTL, transaction limits, SDK failures).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from idemflow import Idem, Tx, atomic, open_store, run, workflow
from idemflow.errors import BackendError, InvalidValueError, LimitExceededError, TransientError
from idemflow.keys import RUNS_TABLE
from idemflow.records import RunRecord, RunStatus, run_ref
from idemflow.serialization import JSON, encode
from idemflow.stores.base import (
    Check,
    Committed,
    Cond,
    Conflict,
    Delete,
    Increment,
    Insert,
    Op,
    Put,
    RowRef,
    RunQuery,
)
from idemflow.stores.dynamodb import DynamoDBStore
from idemflow.testing.servers import Moto
from tests.conftest import TEST_TABLES, make_factory

pytestmark = pytest.mark.cloud


@pytest.fixture
def store(moto: Moto, request: pytest.FixtureRequest, tmp_path: Path) -> DynamoDBStore:
    made = make_factory("dynamodb", request, tmp_path)()
    assert isinstance(made, DynamoDBStore)
    return made


def ref(key: str, partition: str = "p1", table: str = "accounts") -> RowRef:
    return RowRef(table, partition, key)


def put(r: RowRef, value: JSON, expect: Any = Cond.ANY, expires_at: float | None = None) -> Put:
    return Put(r, value, encode(value), expect, expires_at)


def insert(r: RowRef, value: JSON) -> Insert:
    return Insert(r, value, encode(value))


def raw(store: DynamoDBStore, r: RowRef) -> dict[str, Any]:
    """The item exactly as DynamoDB holds it."""
    found = store.client.get_item(
        TableName=store.table_name(r.table),
        Key={"pk": {"S": r.partition}, "sk": {"S": r.key}},
        ConsistentRead=True,
    )
    return dict(found["Item"])


def unchanged_by(
    store: DynamoDBStore, ops: list[Op], error: type[Exception], match: str | None = None
) -> None:
    """``ops`` fail with ``error`` before anything is sent: no call, no row."""
    before = list(store.scan("accounts"))
    trips = store.round_trips
    with pytest.raises(error, match=match):
        store.commit(ops)
    assert store.round_trips == trips
    assert list(store.scan("accounts")) == before


# -- item layout ---------------------------------------------------------------------------------


def test_numbers_live_in_n_so_increment_adds_after_a_put(store: DynamoDBStore) -> None:
    counter = ref("dcount")
    store.commit([put(counter, 10)])
    item = raw(store, counter)
    assert item["n"] == {"N": "10"} and "v" not in item and set(item["ver"]) == {"N"}
    created = int(item["ver"]["N"])  # random: a recreated row must not repeat an old version
    assert store.commit([Increment(counter, 5)]) == Committed()
    row = store.read(counter)
    assert row is not None and row.value == 15 and type(row.value) is int and row.version == created + 1
    store.commit([Increment(counter, 0.25)])
    row = store.read(counter)
    assert row is not None and row.value == 15.25 and type(row.value) is float


def test_put_replaces_number_by_text_and_back(store: DynamoDBStore) -> None:
    r = ref("dswitch")
    store.commit([put(r, 3)])
    created = int(raw(store, r)["ver"]["N"])
    store.commit([put(r, "three")])
    item = raw(store, r)
    assert item["v"] == {"S": '"three"'} and "n" not in item and item["ver"] != {"N": str(created)}
    store.commit([put(r, 4.0)])
    item = raw(store, r)
    assert item["n"] == {"N": "4.0"} and "v" not in item and item["f"] == {"BOOL": True}
    store.commit([put(r, 4)])
    item = raw(store, r)
    assert set(item) == {"pk", "sk", "n", "ver"} and item["n"] == {"N": "4"}  # the float mark went


def test_increment_of_text_names_the_row(store: DynamoDBStore) -> None:
    r = ref("dtext", partition="pz")
    store.commit([put(r, {"not": "a number"})])
    with pytest.raises(InvalidValueError, match=r"accounts/pz.*dict"):
        store.commit([Increment(r, 1)])


def test_numbers_dynamodb_cannot_hold_stay_exact_json(store: DynamoDBStore) -> None:
    values: list[JSON] = [10**40, -(10**39), 1e300, 5e-324, 0.1, 2**63]
    for index, value in enumerate(values):
        store.commit([put(ref(f"d{index}"), value)])
    for index, value in enumerate(values):
        row = store.read(ref(f"d{index}"))
        assert row is not None and row.value == value and type(row.value) is type(value), value
    assert "v" in raw(store, ref("d0")) and "n" in raw(store, ref("d5"))


def test_integral_float_reads_back_as_a_float(store: DynamoDBStore) -> None:
    """DynamoDB's N type has no int/float distinction: the item's mark keeps 2.0 a float."""
    store.commit([put(ref("dfloat"), 2.0)])
    row = store.read(ref("dfloat"))
    assert row is not None and row.value == 2.0 and type(row.value) is float
    assert raw(store, ref("dfloat"))["f"] == {"BOOL": True}


def test_a_runs_table_from_before_the_index_gets_it_with_its_open_runs_marked(moto: Moto) -> None:
    """Upgrading: ``create_tables`` (``idemflow tables create``) adds the sparse index of open runs
    to a runs table 0.1 created, and marks the run records of unfinished requests already there."""
    store = DynamoDBStore(
        endpoint_url=moto.endpoint, region_name=moto.region, prefix="upgrade", open_runs_index=True
    )
    client, name = store.client, store.table_name(RUNS_TABLE)
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    for request_id, state in (("r-open", "running"), ("r-failed", "failed"), ("r-done", "completed")):
        client.put_item(
            TableName=name,
            Item={  # as 0.1 wrote them: no index attribute
                "pk": {"S": request_id},
                "sk": {"S": "rcheckout"},
                "v": {"S": encode({"fp": "x", "status": state})},
                "ver": {"N": "7"},
            },
        )
    store.create_tables()
    indexes = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
    assert [index["IndexName"] for index in indexes] == ["open"]
    page = store.run_page(RunQuery(limit=10, workflow="checkout", open_only=True))
    assert sorted(found.partition for found in page) == ["r-failed", "r-open"]
    store.create_tables()  # twice: nothing more to do


def test_a_runs_table_made_without_the_index_lists_its_open_runs_by_a_scan(moto: Moto) -> None:
    """By default (and with ``open_runs_index=0``) no index writes on the request path; the open
    runs are still listed (a filtered scan), and a later store that wants the index adds it to the
    same table (``open_runs_index=1``, which its URL says) and finds the open runs already marked."""
    url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix=noindex&open_runs_index=0"
    store = open_store(url)
    assert isinstance(store, DynamoDBStore) and not store.open_runs_index
    assert open_store(store.url).open_runs_index is False  # type: ignore[attr-defined]
    default = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix="noindex")
    assert not default.open_runs_index and "open_runs_index" not in default.url
    store.create_tables("accounts")
    client, name = store.client, store.table_name(RUNS_TABLE)
    assert not client.describe_table(TableName=name)["Table"].get("GlobalSecondaryIndexes")

    @workflow("half")
    def half(fail: bool) -> Generator[Idem[Any], Any, str]:
        yield atomic("accounts", "p1", lambda tx: tx.increment("n"))
        if fail:
            yield atomic("accounts", "p2", _refuse)
        yield atomic("accounts", "p3", lambda tx: tx.increment("n"))
        return "done"

    run(half(False), request_id="r-done", store=store)
    with pytest.raises(RuntimeError):
        run(half(True), request_id="r-failed", store=store)
    for query in (RunQuery(limit=10, workflow="half", open_only=True), RunQuery(limit=10, open_only=True)):
        assert [found.partition for found in store.run_page(query)] == ["r-failed"]
    indexed = open_store(url.replace("open_runs_index=0", "open_runs_index=1"))
    assert isinstance(indexed, DynamoDBStore) and indexed.open_runs_index
    assert open_store(indexed.url).open_runs_index is True  # type: ignore[attr-defined]
    indexed.create_tables()
    indexes = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
    assert [index["IndexName"] for index in indexes] == ["open"]
    page = indexed.run_page(RunQuery(limit=10, workflow="half", open_only=True))
    assert [found.partition for found in page] == ["r-failed"]


def test_tags_are_filtered_server_side_on_every_listing_path(moto: Moto) -> None:
    """Tags asked for are a filter on the record's text whichever way a page is read: a scan of
    the runs table, its index of open runs (queried for one workflow, scanned for all), or a scan
    keeping open runs on a table without the index; a record that holds the tag's text only in
    its input is not listed."""
    for indexed in (True, False):
        store = DynamoDBStore(
            endpoint_url=moto.endpoint,
            region_name=moto.region,
            prefix=f"tags{indexed:d}",
            open_runs_index=indexed,
        )
        store.create_tables()
        decoy = {"args": [{"customer": "c-1"}], "kwargs": {}}
        for n, tags in enumerate(
            [{"customer": "c-1"}, {"customer": "c-2"}, None, {"customer": "c-1", "x": "é"}]
        ):
            value = RunRecord(
                "f" * 64, RunStatus.RUNNING, input=decoy, started_at=1.0 + n, tags=tags
            ).to_json()
            store.commit([Insert(run_ref("w", f"r{n}"), value, encode(value))])
        wanted = (("customer", "c-1"),)
        for query in (
            RunQuery(limit=10, tags=wanted),
            RunQuery(limit=10, tags=wanted, open_only=True),
            RunQuery(limit=10, tags=wanted, open_only=True, workflow="w"),
            RunQuery(limit=1, tags=(("x", "é"), *wanted), open_only=True, workflow="w"),
        ):
            found = sorted(row.partition for row in store.run_page(query))
            assert found == (["r3"] if query.limit == 1 else ["r0", "r3"]), (indexed, query)


def _refuse(tx: Tx) -> None:
    raise RuntimeError("declined")


def test_expires_at_is_stored_for_ttl(store: DynamoDBStore) -> None:
    store.commit([put(ref("dttl"), "x", expires_at=1_900_000_000.7), insert(ref("mttl"), 1)])
    assert raw(store, ref("dttl"))["expires_at"] == {"N": "1900000000"}
    store.commit([put(ref("dttl"), "y")])
    assert "expires_at" not in raw(store, ref("dttl"))


def test_created_tables_have_ttl_enabled(store: DynamoDBStore) -> None:
    store.create_tables(*TEST_TABLES)  # a second time: existing tables are fine
    for table in (*TEST_TABLES, RUNS_TABLE):
        ttl = store.client.describe_time_to_live(TableName=store.table_name(table))
        assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "ENABLED"
        assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"


# -- conditions and conflicts --------------------------------------------------------------------


def test_conflict_lists_every_failing_operation(store: DynamoDBStore) -> None:
    memo, data, guard, free = ref("mmemo"), ref("ddata"), ref("dguard"), ref("dfree")
    store.commit([insert(memo, "first"), put(data, 1), put(guard, 1)])
    stored = store.read(memo)
    outcome = store.commit([insert(memo, "again"), put(data, 2, 7), Check(guard, Cond.ABSENT), put(free, 1)])
    assert isinstance(outcome, Conflict)
    assert [f.index for f in outcome.failures] == [0, 1, 2]
    existing = outcome.failures[0].existing
    assert stored is not None and existing == stored and existing.value == "first"
    assert store.read(free) is None


def test_delete_expecting_absent_is_a_condition(store: DynamoDBStore) -> None:
    r = ref("dgone")
    assert store.commit([Delete(r, Cond.ABSENT)]) == Committed()
    store.commit([put(r, 1)])
    assert isinstance(store.commit([Delete(r, Cond.ABSENT)]), Conflict)
    assert store.commit([Check(r, Cond.ANY), put(ref("dother"), 2)]) == Committed()


def test_blind_put_replaces_the_item_with_a_new_version(store: DynamoDBStore) -> None:
    """A blind write is a ``PutItem``: the whole item replaced, under a fresh random version that a
    reader of the old one cannot write against, and the conditional put after it adds one."""
    r = ref("dver")
    versions = []
    for value in ("a", "b", "c"):
        store.commit([put(r, value)])
        row = store.read(r)
        assert row is not None
        versions.append(row.version)
    assert len(set(versions)) == 3
    assert store.commit([put(r, "d", expect=versions[0])]) != Committed()
    assert store.commit([put(r, "d", expect=versions[2])]) == Committed()
    row = store.read(r)
    assert row is not None and row.value == "d" and row.version == versions[2] + 1


def test_racing_commits_apply_once(store: DynamoDBStore) -> None:
    filler = "x" * 1000  # a bigger table widens moto's race window (it deep-copies tables per transaction)
    for start in range(0, 200, 50):
        store.commit([put(ref(f"dfill{n}", "pfill"), filler) for n in range(start, start + 50)])
    for round_ in range(10):
        winners = race(store, [insert(ref(f"mrace{round_}"), 1), Increment(ref(f"dcount{round_}"), 1)], 6)
        row = store.read(ref(f"dcount{round_}"))
        assert winners == 1 and row is not None and row.value == 1, (round_, winners, row)


def race(store: DynamoDBStore, ops: list[Op], contenders: int) -> int:
    """How many of ``contenders`` threads committing ``ops`` at once were told Committed."""
    winners: list[int] = []
    barrier = threading.Barrier(contenders)

    def contender() -> None:
        barrier.wait()
        if store.commit(ops) == Committed():
            winners.append(1)

    threads = [threading.Thread(target=contender) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(winners)


# -- limits: refused before anything is sent -------------------------------------------------------


def test_a_value_over_the_declared_limit_is_refused_before_sending(store: DynamoDBStore) -> None:
    """DYNAMODB_CAPABILITIES.max_value_bytes (390,000) keeps an item under DynamoDB's 400 KB."""
    unchanged_by(store, [put(ref("dbig"), "x" * 390_000)], LimitExceededError, match=r"accounts/p1.*390000")
    unchanged_by(store, [put(ref("dok"), 1), insert(ref("mbig"), "é" * 205_000)], LimitExceededError)


def test_transaction_over_4_mb_is_refused(store: DynamoDBStore) -> None:
    ops: list[Op] = [put(ref(f"d{n}"), "x" * 380_000) for n in range(11)]
    unchanged_by(store, ops, LimitExceededError, match="allows 4000000")


def test_more_than_100_operations_are_refused(store: DynamoDBStore) -> None:
    ops: list[Op] = [put(ref(f"d{n}"), n) for n in range(101)]
    unchanged_by(store, ops, LimitExceededError, match=r"101 operations.*allows 100")
    assert store.commit(ops[:100]) == Committed()


def test_oversize_keys_are_refused(store: DynamoDBStore) -> None:
    """The declared key limit (1 KiB, DynamoDB's sort-key limit) holds for partitions too."""
    unchanged_by(store, [put(ref("d" + "k" * 1024), 1)], LimitExceededError)
    unchanged_by(store, [put(ref("dk", partition="p" * 1025), 1)], LimitExceededError)
    store.commit([put(ref("d" + "k" * 1023, partition="p" * 1024), 1)])


def test_same_item_twice_is_refused(store: DynamoDBStore) -> None:
    r = ref("dtwice")
    unchanged_by(store, [put(r, 1), Increment(r, 1)], BackendError)
    unchanged_by(store, [Check(r, Cond.ABSENT), put(r, 1)], BackendError)


# -- backend failures --------------------------------------------------------------------------------


def test_missing_table_names_the_table_and_the_fix(store: DynamoDBStore) -> None:
    r = ref("dx", table="nosuchtable")
    physical = store.table_name("nosuchtable")
    for action in (
        lambda: store.read(r),
        lambda: store.commit([put(r, 1)]),
        lambda: list(store.scan(r.table)),
    ):
        with pytest.raises(BackendError, match="idemflow tables create") as caught:
            action()
        assert physical in str(caught.value) and not isinstance(caught.value, TransientError)
    with pytest.raises(BackendError, match=physical):
        store.commit([put(ref("dy"), 1), Check(r, Cond.ABSENT)])


def test_connection_refused_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: nothing listens there
    config = Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=0.5, read_timeout=0.5)
    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", config=config
    )
    store = DynamoDBStore(client=client, prefix="tclosed")
    with pytest.raises(TransientError):
        store.read(ref("dx"))
    with pytest.raises(TransientError):
        store.commit([put(ref("dx"), 1)])
    assert store.round_trips == 2
    store.commit_cache([put(ref("dx"), 1)])  # never raises; the failure is logged
    store.close()


@pytest.mark.parametrize("lost", [ConnectionClosedError, ReadTimeoutError])
def test_lost_answer_resolves_on_retry(
    store: DynamoDBStore, lost: type[ConnectionClosedError | ReadTimeoutError]
) -> None:
    memo, counter, data = ref("mwf|req|s1"), ref("dcount"), ref("ddata")
    store.commit([put(data, "old")])
    seen = store.read(data)
    assert seen is not None
    ops: list[Op] = [insert(memo, {"result": 42}), Increment(counter, 5), put(data, "new", seen.version)]
    fired = threading.Event()

    def drop_answer(**kwargs: Any) -> None:
        if not fired.is_set():  # the server has applied the transaction: only the answer is lost
            fired.set()
            raise lost(endpoint_url=store.client.meta.endpoint_url)

    store.client.meta.events.register("after-call.dynamodb.TransactWriteItems", drop_answer)
    with pytest.raises(TransientError):
        store.commit(ops)
    outcome = store.commit(ops)
    assert isinstance(outcome, Conflict)
    first = outcome.failures[0]
    assert first.index == 0 and first.existing is not None and first.existing.value == {"result": 42}
    row = store.read(counter)
    assert row is not None and row.value == 5  # applied exactly once
    row = store.read(data)
    assert row is not None and row.value == "new"


def test_read_many_is_one_batch_get_per_100_rows(store: DynamoDBStore) -> None:
    refs = [ref(f"d{n}", partition=f"p{n % 7}") for n in range(110)]
    store.commit([put(r, n) for n, r in enumerate(refs[:20])])
    before = store.round_trips
    rows = store.read_many([*refs, refs[0]])  # a duplicate is read once, answered twice
    assert store.round_trips - before == 2
    assert [row.value if row else None for row in rows] == [*range(20), *[None] * 90, 0]
    before = store.round_trips
    assert store.read_many([refs[0], refs[0]])[1] == store.read(refs[0])
    assert store.round_trips - before == 2
    assert store.read_many([]) == []
    with pytest.raises(BackendError, match="idemflow tables create"):
        store.read_many([refs[0], ref("dx", table="nosuchtable")])


# -- cache writes, round trips, URLs ------------------------------------------------------------------


def test_commit_cache_is_off_the_callers_path(store: DynamoDBStore) -> None:
    r = ref("rrun", partition="req1", table=RUNS_TABLE)
    gate = threading.Event()

    def hold(**kwargs: Any) -> None:  # returning a value would replace the call
        gate.wait(5)

    store.client.meta.events.register("before-call.dynamodb.TransactWriteItems", hold)
    store.commit_cache([put(r, {"status": "completed"})])  # returns while the write is held back
    assert not gate.is_set()
    gate.set()
    store.flush()
    row = store.read(r)
    assert row is not None and row.value == {"status": "completed"}


def test_failed_cache_write_is_logged_not_raised(
    store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="idemflow.stores.dynamodb"):
        store.commit_cache([put(ref("dx", table="nosuchtable"), 1)])
        store.flush()
    assert "dropped" in caplog.text


def test_round_trips_count_every_call(store: DynamoDBStore) -> None:
    before = store.round_trips
    store.read(ref("da"))
    store.commit([put(ref("da"), 1), put(ref("db"), 2)])
    list(store.scan("accounts"))
    list(store.scan("accounts", "p1"))
    store.commit_cache([put(ref("dc"), 3)])
    store.flush()
    assert store.round_trips - before == 5


def test_round_trips_are_thread_safe(store: DynamoDBStore) -> None:
    before = store.round_trips
    threads = [threading.Thread(target=lambda: [store.read(ref("dx")) for _ in range(10)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.round_trips - before == 80


def test_scan_is_sorted_across_partitions(store: DynamoDBStore) -> None:
    for partition, key in [("pb", "da"), ("pa", "dz"), ("pa", "dm"), ("pc", "d")]:
        store.commit([put(ref(key, partition), key)])
    assert [(p, k) for p, k, _ in store.scan("accounts")] == [
        ("pa", "dm"),
        ("pa", "dz"),
        ("pb", "da"),
        ("pc", "d"),
    ]


def test_tables_lists_this_prefix_only(store: DynamoDBStore, moto: Moto) -> None:
    assert store.tables() == sorted((*TEST_TABLES, RUNS_TABLE))
    other = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix="zzother")
    try:
        other.create_tables("extra")
        assert other.tables() == sorted(["extra", RUNS_TABLE])
    finally:
        other.close()


def test_open_store_url(moto: Moto) -> None:
    opened = open_store(f"dynamodb:?endpoint={moto.endpoint}&region=us-east-1&prefix=abc")
    try:
        assert isinstance(opened, DynamoDBStore) and opened.table_name("accounts") == "abcaccounts"
        opened.create_tables("accounts")
        assert opened.commit([put(ref("durl"), "ok")]) == Committed()
        row = opened.read(ref("durl"))
        assert row is not None and row.value == "ok"
        assert "prefix=abc" in opened.url
    finally:
        opened.close()


def test_every_call_sends_the_fixed_user_agent(store: DynamoDBStore) -> None:
    """The header is built once (botocore rebuilds its own twice per call): what is sent is
    botocore's string for this process plus lib/idemflow, on every operation."""
    from idemflow.stores._dynamodb_calls import user_agent

    sent: list[str] = []

    def seen(request: Any, **_: Any) -> None:
        header = request.headers["User-Agent"]
        sent.append(header.decode() if isinstance(header, bytes) else header)

    store.client.meta.events.register("before-send.dynamodb", seen)
    ref = RowRef("items", "ua", "dk")
    store.commit([Put(ref, 1, "1")])
    store.commit([Put(ref, 2, "2"), Put(RowRef("items", "ua", "dj"), 3, "3")])
    assert store.read(ref) is not None
    assert len(sent) == 3
    assert len(set(sent)) == 1  # the same string on every call (boto3 appends its session's extra)
    assert sent[0].startswith(user_agent())
