"""Contention: no request fails on a hot row, reads that meet a commit are retried, nothing is lost.

The DynamoDB cases run on AWS's DynamoDB Local under
:class:`idemflow.testing.conflicts.DynamoDBConflicts`, which cancels
overlapping transactions by the service's rules (DynamoDB Local itself
serialises them and never does).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from idemflow import ConflictError, Idem, RetryPolicy, ShardedCounter, Tx, atomic, run, workflow
from idemflow.aggregates import totals
from idemflow.client import RunStatus, get
from idemflow.core.policy import resend
from idemflow.errors import InvalidInputError, TransientError
from idemflow.keys import RUNS_TABLE
from idemflow.running.runner import run_status
from idemflow.stores import Store
from idemflow.stores._cache_writer import CacheWriter
from idemflow.testing import Fault, FaultyStore
from idemflow.testing.conflicts import DynamoDBConflicts
from idemflow.testing.servers import DynamoDBLocal
from tests.conftest import StoreFactory, dynamodb_local_store

# -- the emulator follows AWS's rules --------------------------------------------------------------


def _key(pk: str, sk: str = "k") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _put(table: str, pk: str, value: str) -> dict[str, Any]:
    return {"Put": {"TableName": table, "Item": {**_key(pk), "v": {"S": value}}}}


@pytest.fixture
def local_client(dynamodb_local: DynamoDBLocal) -> Generator[tuple[Any, str], None, None]:
    import boto3

    client = boto3.client("dynamodb", endpoint_url=dynamodb_local.endpoint, region_name=dynamodb_local.region)
    table = f"c{uuid.uuid4().hex[:10]}"
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    yield client, table
    client.close()


def _codes(exc: Any) -> list[str]:
    return [reason["Code"] for reason in exc.response["CancellationReasons"]]


def test_the_emulator_cancels_what_meets_a_transaction_in_flight(local_client: tuple[Any, str]) -> None:
    client, table = local_client
    held, release = threading.Event(), threading.Event()

    def hold(**_: Any) -> None:  # the first transaction stops on its way to the server
        if not held.is_set():
            held.set()
            release.wait(30)

    with DynamoDBConflicts(client) as conflicts:
        client.meta.events.register("before-send.dynamodb.TransactWriteItems", hold)
        first = threading.Thread(
            target=lambda: client.transact_write_items(TransactItems=[_put(table, "hot", "first")])
        )
        first.start()
        assert held.wait(30)
        client.meta.events.unregister("before-send.dynamodb.TransactWriteItems", hold)
        errors = client.exceptions
        with pytest.raises(errors.TransactionCanceledException) as write:
            client.transact_write_items(
                TransactItems=[_put(table, "cold", "x"), _put(table, "hot", "second")]
            )
        assert _codes(write.value) == ["None", "TransactionConflict"]
        with pytest.raises(errors.TransactionCanceledException) as read:
            client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": _key("hot")}}])
        assert _codes(read.value) == ["TransactionConflict"]
        with pytest.raises(errors.TransactionConflictException):
            client.put_item(TableName=table, Item={**_key("hot"), "v": {"S": "single"}})
        assert "Item" not in client.get_item(TableName=table, Key=_key("hot"), ConsistentRead=True)
        client.transact_write_items(TransactItems=[_put(table, "cold", "other item: no conflict")])
        release.set()
        first.join(30)
        assert conflicts.produced == {"TransactWriteItems": 1, "TransactGetItems": 1, "PutItem": 1}
    found = client.get_item(TableName=table, Key=_key("hot"), ConsistentRead=True)
    assert found["Item"]["v"]["S"] == "first"  # the cancelled ones applied nothing
    client.transact_write_items(TransactItems=[_put(table, "hot", "after")])  # released


def test_phantom_conflicts_come_at_their_rate(local_client: tuple[Any, str]) -> None:
    client, table = local_client
    with DynamoDBConflicts(client, phantom_rate=0.5, seed=3) as conflicts:
        failed = 0
        for n in range(200):
            try:
                client.transact_write_items(TransactItems=[_put(table, f"p{n}", "x")])
            except client.exceptions.TransactionCanceledException:
                failed += 1
    assert failed == conflicts.produced["TransactWriteItems"] and 60 <= failed <= 140
    with pytest.raises(ValueError, match="phantom_rate"):
        DynamoDBConflicts(client, phantom_rate=1.5)


# -- no request fails under contention -------------------------------------------------------------

THREADS = 8
PER_THREAD = 4


@workflow("vote")
def vote(ballot: dict[str, str]) -> Generator[Idem[Any], Any, int]:
    """Record a vote, then a read-modify-write of one summary row: the worst case for contention."""

    def record(tx: Tx) -> None:
        tx.put(f"by:{ballot['voter']}", ballot["choice"])

    def tally(tx: Tx) -> int:
        counts = dict(tx.get("counts", {}))
        counts[ballot["choice"]] = counts.get(ballot["choice"], 0) + 1
        tx.put("counts", counts)
        return int(sum(counts.values()))

    yield atomic("tablea", ballot["poll"], record)
    counted: int = yield atomic("tableb", ballot["poll"], tally)
    return counted


def _hammer(store: Store, poll: str) -> list[BaseException]:
    errors: list[BaseException] = []

    def user(u: int) -> None:
        for n in range(PER_THREAD):
            ballot = {"poll": poll, "voter": f"u{u}-{n}", "choice": "yes" if n % 2 else "no"}
            for _ in range(2):  # each request sent twice
                try:
                    run(vote(ballot), request_id=f"{poll}-{u}-{n}", store=store)
                except BaseException as exc:  # noqa: BLE001 - every failure is counted
                    errors.append(exc)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(user, range(THREADS)))
    return errors


def test_a_hot_row_read_modified_by_many_users_fails_no_request(store: Store) -> None:
    poll = f"p{uuid.uuid4().hex[:8]}"
    errors = _hammer(store, poll)
    assert errors == []
    assert get(store, "tableb", poll, "counts") == {
        "yes": THREADS * PER_THREAD // 2,
        "no": THREADS * PER_THREAD // 2,
    }


def test_concurrent_adds_to_a_sharded_counter_are_counted_once(store: Store) -> None:
    visits = ShardedCounter("visits", shards=8)
    page = f"p{uuid.uuid4().hex[:8]}"

    def visit(n: int) -> None:
        for _ in range(2):
            run(atomic("tablea", page, lambda tx: visits.add(tx)), request_id=f"{page}-{n}", store=store)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(visit, range(48)))
    assert visits.read(store, "tablea", page) == 48
    from idemflow.client import rows

    assert totals({key: value for (_p, key), value in rows(store, "tablea", page).items()}) == {"visits": 48}
    assert run(atomic("tablea", page, visits.total), request_id=f"{page}-total", store=store) == 48


def test_a_sharded_counter_refuses_bad_shapes() -> None:
    with pytest.raises(InvalidInputError, match="shards"):
        ShardedCounter("n", shards=0)
    with pytest.raises(InvalidInputError, match="shards"):
        ShardedCounter("n", shards=True)
    with pytest.raises(InvalidInputError, match="empty"):
        ShardedCounter("")


def test_a_retry_waits_its_turn_on_a_partition_but_never_past_its_deadline() -> None:
    from idemflow.engine.turns import GATES

    store, held, release = object(), threading.Event(), threading.Event()
    order: list[str] = []

    def holder() -> None:
        until = time.monotonic() + 30
        with GATES.turn(store, "t", "p", until), GATES.turn(store, "t", "p", until):  # re-entrant
            held.set()
            release.wait(30)
            order.append("holder")

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(30)
    with GATES.turn(store, "t", "p", time.monotonic() + 0.05):  # deadline passed: goes ahead
        order.append("late retry")
    with GATES.turn(store, "t", "other", time.monotonic() + 30):  # another partition: no wait
        order.append("other partition")
    release.set()
    with GATES.turn(store, "t", "p", time.monotonic() + 30):  # waits for the holder
        order.append("next retry")
    thread.join(30)
    assert order == ["late retry", "other partition", "holder", "next retry"]


# -- reads inside a body ---------------------------------------------------------------------------


def test_a_transient_read_inside_a_body_reruns_it(store_factory: StoreFactory) -> None:
    store = store_factory()
    flaky = FaultyStore(
        store, lambda point: Fault.TRANSIENT if point.kind == "read" and point.index < 3 else None, reads=True
    )
    space = f"r{uuid.uuid4().hex[:8]}"

    def body(tx: Tx) -> int:
        tx.put("seen", tx.get("seen", 0) + 1)
        return int(tx.get("seen"))

    assert run(atomic("tablea", space, body), request_id=space, store=flaky) == 1
    assert [fault for _point, fault in flaky.injected] == [Fault.TRANSIENT] * 3


def test_a_body_that_raised_on_reads_that_were_never_one_snapshot_is_rerun(store: Store) -> None:
    """A transfer moves money between two rows of one partition; a body that reads one row before
    and one after it sees money missing. Its commit would be refused; its exception must be too."""
    space = f"s{uuid.uuid4().hex[:8]}"

    def fill(tx: Tx) -> None:
        tx.put("a", 50)
        tx.put("b", 50)

    def move(tx: Tx) -> None:
        tx.put("a", tx.get("a") - 20)
        tx.put("b", tx.get("b") + 20)

    run(atomic("tablea", space, fill), request_id=f"{space}-0", store=store)
    moved = threading.Event()

    def audit(tx: Tx) -> int:
        a = int(tx.get("a"))
        if not moved.is_set():  # a transfer commits between this body's two reads
            moved.set()
            run(atomic("tablea", space, move), request_id=f"{space}-move", store=store)
        b = int(tx.get("b"))
        if a + b != 100:
            raise ValueError(f"money missing: {a} + {b}")
        return a + b

    assert run(atomic("tablea", space, audit), request_id=f"{space}-audit", store=store) == 100


def test_a_step_that_keeps_conflicting_stops_at_the_deadline(store_factory: StoreFactory) -> None:
    always = FaultyStore(store_factory(), lambda _point: Fault.CONFLICT)
    space = f"d{uuid.uuid4().hex[:8]}"

    def body(tx: Tx) -> None:
        tx.put("n", tx.get("n", 0) + 1)

    started = time.monotonic()
    with pytest.raises(ConflictError):
        run(atomic("tablea", space, body), request_id=space, store=always, policy=RetryPolicy(deadline=0.3))
    assert len(always.injected) >= 2  # retried, not given up at once
    assert time.monotonic() - started < 30  # the policy's deadline, not the default one


# -- nothing is lost -------------------------------------------------------------------------------


def test_a_cache_write_that_meets_transient_errors_is_resent() -> None:
    import logging

    written: list[list[str]] = []
    failures = iter([TransientError("conflict"), TransientError("throttled")])

    def write(ops: Any) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        written.append(list(ops))

    writer = CacheWriter("test", write, logging.getLogger("test"))
    writer.submit(["completion"])
    writer.flush()
    writer.close()
    assert written == [["completion"]]


def test_a_completion_record_that_meets_a_conflict_is_not_lost(dynamodb_local: DynamoDBLocal) -> None:
    """The outcome rides in the last step's commit; the service cancels that commit twice (a
    conflict on the run record's blind write): the request starts over and still completes once."""
    store = dynamodb_local_store(dynamodb_local, f"t{uuid.uuid4().hex[:8]}", phantom_rate=0.0)
    store.create_tables("tablea", "tableb")
    client: Any = store.client
    cancelled: list[str] = []

    def conflict_on_completion(params: Any, **_: Any) -> Any:  # the service cancels a blind write
        items = json.loads(params["body"])["TransactItems"]
        completion = [item for item in items if item.get("Put", {}).get("TableName", "").endswith(RUNS_TABLE)]
        if len(cancelled) < 2 and any("ConditionExpression" not in item["Put"] for item in completion):
            cancelled.append("completion")
            from idemflow.testing.conflicts import _cancelled

            return _cancelled("TransactWriteItems", [True] * len(items))
        return None

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", conflict_on_completion)
    space = f"c{uuid.uuid4().hex[:8]}"
    assert run(vote({"poll": space, "voter": "v", "choice": "yes"}), request_id=space, store=store) == 1
    store.flush()
    assert cancelled == ["completion", "completion"]
    record = run_status(store, "vote", space)
    assert record is not None and record.status is RunStatus.COMPLETED and record.result == 1
    assert run(vote({"poll": space, "voter": "v", "choice": "yes"}), request_id=space, store=store) == 1
    store.close()


def test_rows_expire_by_wall_time_not_by_the_workflow_clock(dynamodb_local: DynamoDBLocal) -> None:
    store = dynamodb_local_store(dynamodb_local, f"t{uuid.uuid4().hex[:8]}", phantom_rate=0.0)
    store.create_tables("tablea", "tableb")
    fixed = 1767225600.0  # 2026-01-01, the testing kit's clock
    space = f"e{uuid.uuid4().hex[:8]}"
    run(
        vote({"poll": space, "voter": "v", "choice": "no"}),
        request_id=space,
        store=store,
        clock=lambda: fixed,
    )
    store.flush()
    client: Any = store.client
    items = client.scan(TableName=store.table_name("tablea"))["Items"]
    expiries = [float(item["expires_at"]["N"]) for item in items if "expires_at" in item]
    assert expiries and min(expiries) >= time.time() + RetryPolicy().retention - 3600
    store.close()


def test_read_many_asks_for_up_to_a_hundred_rows_at_once(dynamodb_local: DynamoDBLocal) -> None:
    from idemflow.stores.base import Put, RowRef

    store = dynamodb_local_store(dynamodb_local, f"t{uuid.uuid4().hex[:8]}", phantom_rate=0.0)
    store.create_tables("tablea")
    refs = [RowRef("tablea", "p", f"d{n}") for n in range(150)]
    for start in range(0, 150, 50):
        resend(store.commit, [Put(ref, n, str(n)) for n, ref in enumerate(refs[start : start + 50], start)])
    before = store.round_trips
    rows = store.read_many([*refs, RowRef("tablea", "p", "missing")])
    assert store.round_trips - before == 2
    assert [row.value if row else None for row in rows] == [*range(150), None]
    store.close()


def test_an_effect_whose_commit_fails_transiently_is_not_called_again(store_factory: StoreFactory) -> None:
    """A step's failed send reruns its body, except an effect's: that would call the outside again."""
    from idemflow import effect

    calls: list[str] = []
    flaky = FaultyStore(
        store_factory(), lambda point: Fault.TRANSIENT if point.kind == "commit" and point.index < 2 else None
    )

    @workflow("notify")
    def notify(who: str) -> Generator[Idem[Any], Any, str]:
        sent: str = yield effect(lambda key: calls.append(key) or f"sent to {who}")
        return sent

    space = f"n{uuid.uuid4().hex[:8]}"
    assert run(notify("ada"), request_id=space, store=flaky) == "sent to ada"
    assert len(calls) == 1 and [fault for _point, fault in flaky.injected] == [Fault.TRANSIENT] * 2
