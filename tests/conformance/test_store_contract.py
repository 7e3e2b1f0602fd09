"""The store protocol contract, run unchanged against every backend.

A new store is done when this file and ``test_workflow_contract.py`` pass on it.
"""

from __future__ import annotations

import threading
import uuid
from decimal import Decimal
from typing import Any

import pytest

import idemflow
from idemflow import atomic
from idemflow.core.policy import resend
from idemflow.errors import BackendError, InvalidValueError
from idemflow.serialization import JSON, encode
from idemflow.stores.base import (
    Check,
    Committed,
    Cond,
    Conflict,
    Delete,
    Increment,
    Insert,
    Put,
    RowRef,
    Store,
)

pytestmark = [pytest.mark.exact_calls, pytest.mark.every_bed]  # the store itself: on every bed


def ref(store: Store, key: str, partition: str = "p1", table: str = "accounts") -> RowRef:
    return RowRef(table, partition, key)


def put(r: RowRef, value: JSON, expect: object = Cond.ANY) -> Put:
    return Put(r, value, encode(value), expect)  # type: ignore[arg-type]


def insert(r: RowRef, value: JSON) -> Insert:
    return Insert(r, value, encode(value))


def test_read_absent_row_is_none(store: Store) -> None:
    assert store.read(ref(store, "dnothing")) is None


def test_insert_then_read(store: Store) -> None:
    r = ref(store, "da")
    assert store.commit([insert(r, {"x": [1, "two", None, True, 2.5]})]) == Committed()
    row = store.read(r)
    assert row is not None
    assert row.value == {"x": [1, "two", None, True, 2.5]}


def test_insert_existing_reports_existing_row(store: Store) -> None:
    r = ref(store, "mmemo")
    store.commit([insert(r, {"v": 1})])
    outcome = store.commit([insert(r, {"v": 2})])
    assert isinstance(outcome, Conflict)
    assert [f.index for f in outcome.failures] == [0]
    existing = outcome.failures[0].existing
    assert existing is not None and existing.value == {"v": 1}
    row = store.read(r)
    assert row is not None and row.value == {"v": 1}


def test_put_with_current_version_succeeds_and_changes_version(store: Store) -> None:
    r = ref(store, "dbal")
    store.commit([put(r, 10)])
    first = store.read(r)
    assert first is not None
    assert store.commit([put(r, 11, first.version)]) == Committed()
    second = store.read(r)
    assert second is not None and second.value == 11
    assert second.version != first.version


def test_put_with_stale_version_conflicts_and_writes_nothing(store: Store) -> None:
    r = ref(store, "dbal")
    store.commit([put(r, 10)])
    stale = store.read(r)
    assert stale is not None
    store.commit([put(r, 20)])
    outcome = store.commit([put(r, 30, stale.version)])
    assert isinstance(outcome, Conflict) and outcome.failures[0].index == 0
    row = store.read(r)
    assert row is not None and row.value == 20


def test_put_expecting_absent(store: Store) -> None:
    r = ref(store, "dnew")
    assert store.commit([put(r, "a", Cond.ABSENT)]) == Committed()
    outcome = store.commit([put(r, "b", Cond.ABSENT)])
    assert isinstance(outcome, Conflict)
    row = store.read(r)
    assert row is not None and row.value == "a"


def test_delete_with_version_and_blind(store: Store) -> None:
    a, b = ref(store, "da"), ref(store, "db")
    store.commit([put(a, 1), put(b, 2)])
    row = store.read(a)
    assert row is not None
    assert store.commit([Delete(a, row.version)]) == Committed()
    assert store.read(a) is None
    assert store.commit([Delete(b)]) == Committed()
    assert store.read(b) is None
    assert store.commit([Delete(ref(store, "dnever"))]) == Committed()


def test_delete_with_stale_version_conflicts(store: Store) -> None:
    a = ref(store, "da")
    store.commit([put(a, 1)])
    stale = store.read(a)
    assert stale is not None
    store.commit([put(a, 2)])
    assert isinstance(store.commit([Delete(a, stale.version)]), Conflict)
    row = store.read(a)
    assert row is not None and row.value == 2


def test_check_guards_a_row_only_read(store: Store) -> None:
    guard, target = ref(store, "dguard"), ref(store, "dtarget")
    store.commit([put(guard, "g")])
    seen = store.read(guard)
    assert seen is not None
    assert store.commit([Check(guard, seen.version), put(target, 1)]) == Committed()
    store.commit([put(guard, "changed")])
    outcome = store.commit([Check(guard, seen.version), put(target, 2)])
    assert isinstance(outcome, Conflict) and outcome.failures[0].index == 0
    row = store.read(target)
    assert row is not None and row.value == 1
    assert store.commit([Check(ref(store, "dabsent"), Cond.ABSENT)]) == Committed()
    assert isinstance(store.commit([Check(guard, Cond.ABSENT)]), Conflict)


def test_failed_commit_applies_nothing(store: Store) -> None:
    memo, data, other = ref(store, "mmemo"), ref(store, "ddata"), ref(store, "dother")
    store.commit([insert(memo, "old")])
    outcome = store.commit([insert(memo, "new"), put(data, 1), put(other, 2)])
    assert isinstance(outcome, Conflict)
    assert outcome.failures[0].index == 0
    assert store.read(data) is None
    assert store.read(other) is None


def test_memo_failure_reported_first_when_data_also_stale(store: Store) -> None:
    """A lost-answer retry: the memo exists and the data version moved on."""
    memo, data = ref(store, "mmemo"), ref(store, "ddata")
    store.commit([put(data, 1)])
    stale = store.read(data)
    assert stale is not None
    store.commit([insert(memo, {"result": 7}), put(data, 2, stale.version)])
    outcome = store.commit([insert(memo, {"result": 8}), put(data, 2, stale.version)])
    assert isinstance(outcome, Conflict)
    first = outcome.failures[0]
    assert first.index == 0 and first.existing is not None
    assert first.existing.value == {"result": 7}


def test_increment(store: Store) -> None:
    """Every store applies Increment; where the backend cannot add server-side
    (Azure) the store reads and writes with an ETag condition inside commit."""
    counter = ref(store, "dcount")
    store.commit([Increment(counter, 5)])
    store.commit([Increment(counter, -2)])
    row = store.read(counter)
    assert row is not None and row.value == 3
    store.commit([Increment(counter, 0.5)])
    row = store.read(counter)
    assert row is not None and row.value == 3.5


@pytest.mark.parametrize(
    ("start", "delta"),
    [
        (None, 7),
        (0, -1),
        (-7, 3),
        (10**14, 10**14),  # the result no longer fits a small-integer fast path
        (10**15 - 1, 1),
        (-(10**15) + 1, -1),
        (10**15, 1),
        (10**17, 2**53 - 1),
        (5, 2**53),
        (3, -(10**16)),
        (2.5, 1),
        (1, 0.25),
    ],
)
def test_increment_is_python_addition(store: Store, start: JSON, delta: int | float) -> None:
    """Whatever path a store takes for an increment (server-side, one SQL statement, read and
    write), the row ends as Python's ``start + delta``, with the same type."""
    counter = ref(store, "dsum")
    if start is not None:
        store.commit([put(counter, start)])
    store.commit([Increment(counter, delta)])
    row = store.read(counter)
    expected = (0 if start is None else start) + delta  # type: ignore[operator]
    assert row is not None and row.value == expected and type(row.value) is type(expected)


@pytest.mark.parametrize(
    ("start", "deltas", "expected"),
    [
        (None, [0.1, 0.2], 0.3),  # decimal, as DynamoDB adds: not 0.30000000000000004
        (5.0, [1], 6.0),  # a float row stays a float (DynamoDB's N has no kind of its own)
        (None, [1.0], 1.0),
        (None, [Decimal("1.10"), 2], Decimal("3.10")),
        (Decimal("0.5"), [0.25], Decimal("0.75")),
        (7, [Decimal("0.1")], Decimal("7.1")),
        (10**37, [9 * 10**37 - 1], 10**38 - 1),  # 38 digits: the most every store holds
        (10**38 - 1, [1], 10**38),  # 1E+38: one significant digit
    ],
)
def test_increment_follows_the_number_model(
    store: Store, start: Any, deltas: list[Any], expected: Any
) -> None:
    """One number model on every store (idemflow.number_model): the same value and the same type."""
    counter = ref(store, "dmodel")
    if start is not None:
        store.commit([put(counter, start)])
    for delta in deltas:
        store.commit([Increment(counter, delta)])
    row = store.read(counter)
    assert row is not None and row.value == expected and type(row.value) is type(expected)


def test_number_rows_keep_their_kind(store: Store) -> None:
    """A whole float, an int and a Decimal written as rows read back as the kind written."""
    for key, value in (("dfloat", 5.0), ("dint", 5), ("ddec", Decimal("5.5")), ("dbig", 10**40 + 1)):
        store.commit([put(ref(store, key), value)])
        row = store.read(ref(store, key))
        assert row is not None and row.value == value and type(row.value) is type(value), key


@pytest.mark.blocking_api  # a store contract: the asynchronous stores' modules rerun it on theirs
@pytest.mark.parametrize(
    "delta", [10**38 + 1, Decimal("1E-131"), 1e200, Decimal("1.000000000000000000000000000000000000001")]
)
def test_an_increment_no_store_can_hold_is_refused_before_any_write(store: Store, delta: Any) -> None:
    counter = ref(store, "dhuge")
    store.commit([put(counter, 1)])
    with pytest.raises(InvalidValueError):
        idemflow.run(
            atomic("accounts", "p1", lambda tx: tx.increment("dhuge", delta)),
            request_id=uuid.uuid4().hex,
            store=store,
        )
    row = store.read(counter)
    assert row is not None and row.value == 1


def test_a_sum_beyond_38_digits_is_refused_and_nothing_is_written(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """The local stores and Azure add in this process and refuse it before writing; DynamoDB
    refuses it at its commit (DynamoDB Local does; moto does not check: pinned here)."""
    counter = ref(store, "dfull")
    store.commit([put(counter, 10**38 - 1)])
    params = getattr(request.node, "callspec", None)
    params = {} if params is None else params.params
    if "dynamodb" in (params.get("store_kind"), params.get("store")):  # moto adds beyond DynamoDB's precision
        store.commit([Increment(counter, 2)])
        return
    with pytest.raises(InvalidValueError):  # 10**38 + 1: 39 significant digits (10**38 itself is 1E+38)
        store.commit([Increment(counter, 2)])
    row = store.read(counter)
    assert row is not None and row.value == 10**38 - 1


def test_a_row_recreated_by_an_increment_has_a_new_version(store: Store) -> None:
    counter = ref(store, "dcount")
    store.commit([put(counter, 1)])
    seen = store.read(counter)
    assert seen is not None
    store.commit([Delete(counter, Cond.ANY)])
    store.commit([Increment(counter, 1)])  # the same value again, as a new row
    assert isinstance(store.commit([put(counter, 5, seen.version)]), Conflict)
    row = store.read(counter)
    assert row is not None and row.value == 1


def test_increment_of_non_number_is_refused(store: Store) -> None:
    text = ref(store, "dtext")
    store.commit([put(text, "hello")])
    with pytest.raises(InvalidValueError):
        store.commit([Increment(text, 1)])
    row = store.read(text)
    assert row is not None and row.value == "hello"


def test_increment_bumps_version(store: Store) -> None:
    counter = ref(store, "dcount")
    store.commit([put(counter, 1)])
    before = store.read(counter)
    assert before is not None
    store.commit([Increment(counter, 1)])
    assert isinstance(store.commit([put(counter, 9, before.version)]), Conflict)


def test_cross_partition_commit_when_supported(store: Store) -> None:
    a = ref(store, "da", partition="p1", table="accounts")
    b = ref(store, "db", partition="p2", table="ledger")
    if not store.capabilities.cross_partition_commit:
        with pytest.raises(BackendError):
            store.commit([put(a, 1), insert(b, 2)])
        assert store.read(a) is None and store.read(b) is None
        return
    assert store.commit([put(a, 1), insert(b, 2)]) == Committed()
    outcome = store.commit([put(a, 5), insert(b, 3)])
    assert isinstance(outcome, Conflict)
    row = store.read(a)
    assert row is not None and row.value == 1


def test_partitions_and_tables_are_separate(store: Store) -> None:
    refs = [
        ref(store, "dk", "p1", "accounts"),
        ref(store, "dk", "p2", "accounts"),
        ref(store, "dk", "p1", "ledger"),
    ]
    for index, r in enumerate(refs):
        store.commit([put(r, index)])
    for index, r in enumerate(refs):
        row = store.read(r)
        assert row is not None and row.value == index


HOSTILE = [
    "d/slash",
    "d\\back",
    "d#hash",
    "d?query",
    "d\x00nul\x1f\x7f",
    "d\t\n\r",
    "d%2F",
    "d%",
    "d~tilde~",
    "dunicode-ünïcødé-日本-🙂",
    "d" + "x" * 400,
    "d'\"quotes",
    "d ",
    "d",
]


def test_hostile_keys_and_partitions_round_trip_distinctly(store: Store) -> None:
    """Keys the backend forbids are escaped injectively: all stay distinct."""
    for index, key in enumerate(HOSTILE):
        partition = "p" + key[1:]
        store.commit([put(ref(store, key, partition), index)])
    for index, key in enumerate(HOSTILE):
        partition = "p" + key[1:]
        row = store.read(ref(store, key, partition))
        assert row is not None and row.value == index, key
    scanned = {(part, key) for part, key, _ in store.scan("accounts")}
    assert scanned == {("p" + key[1:], key) for key in HOSTILE}


def test_large_value_up_to_limit(store: Store) -> None:
    size = min(store.capabilities.max_value_bytes - 1024, 300_000)
    value = {"blob": "x" * size, "n": 1}
    r = ref(store, "dbig")
    assert store.commit([put(r, value)]) == Committed()
    row = store.read(r)
    assert row is not None and row.value == value


def test_values_of_every_json_shape(store: Store) -> None:
    values: list[JSON] = [
        None,
        True,
        False,
        0,
        -17,
        2**53,
        1.5,
        -0.25,
        "",
        "text",
        [],
        {},
        [1, [2, [3]]],
        {"a": {"b": {"c": None}}},
        "ünïcødé 🙂",
    ]
    for index, value in enumerate(values):
        store.commit([put(ref(store, f"d{index}"), value)])
    for index, value in enumerate(values):
        row = store.read(ref(store, f"d{index}"))
        assert row is not None and row.value == value and type(row.value) is type(value), (index, value)


def test_scan_filters_by_partition(store: Store) -> None:
    store.commit([put(ref(store, "da", "p1"), 1)])
    store.commit([put(ref(store, "db", "p2"), 2)])
    table = "accounts"
    assert [(p, k, r.value) for p, k, r in store.scan(table, "p2")] == [("p2", "db", 2)]
    assert sorted((p, k) for p, k, _ in store.scan(table)) == [("p1", "da"), ("p2", "db")]


def test_tables_lists_what_was_written(store: Store) -> None:
    store.commit([put(ref(store, "da", table="ledger"), 1)])
    store.commit([put(ref(store, "da", table="accounts"), 1)])
    assert {"accounts", "ledger"} <= set(store.tables())


def test_commit_cache_is_readable_after_flush(store: Store) -> None:
    r = ref(store, "rcache", table="idemflowruns")
    store.commit_cache([put(r, {"status": "completed"})])
    store.flush()
    row = store.read(r)
    assert row is not None and row.value == {"status": "completed"}


def test_round_trips_are_counted(store: Store) -> None:
    before = store.round_trips
    store.read(ref(store, "dx"))
    store.commit([put(ref(store, "dx"), 1)])
    assert store.round_trips - before == 2


def test_racing_inserts_have_one_winner(store: Store) -> None:
    r = ref(store, "mrace")
    winners: list[int] = []
    barrier = threading.Barrier(4)

    def contender(n: int) -> None:
        barrier.wait()
        if isinstance(resend(store.commit, [insert(r, n)]), Committed):  # conflicts are transient
            winners.append(n)

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
    row = store.read(r)
    assert row is not None and row.value == winners[0]


def test_read_many_across_tables_and_partitions(store: Store) -> None:
    a = ref(store, "da", "p1", "accounts")
    b = ref(store, "rrun", "req", "idemflowruns")
    store.commit([put(a, 1)])
    store.commit([put(b, {"fp": "x"})])
    before = store.round_trips
    rows = store.read_many([a, b, ref(store, "dmissing")])
    assert [row.value if row else None for row in rows] == [1, {"fp": "x"}, None]
    assert store.round_trips - before >= 1
    if store.capabilities.cross_partition_commit:
        assert store.round_trips - before == 1
