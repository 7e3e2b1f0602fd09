"""AzureTableStore against a real Azurite: entity layout, escaping, limits, errors,
lost answers, tombstones and client-side increments.

The shared contract lives in ``tests/conformance``; these tests cover what only
Azure Tables has. Nothing here mocks the SDK: the one wrapped method (the lost
answer) calls the real ``submit_transaction`` and then drops its answer.
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from azure.core.exceptions import ResourceNotFoundError, ServiceResponseError
from hypothesis import given, settings
from hypothesis import strategies as st

from idemflow import open_store
from idemflow.errors import BackendError, InvalidValueError, LimitExceededError, TransientError
from idemflow.serialization import JSON, encode
from idemflow.stores import _azure_entity as ent
from idemflow.stores.azure_tables import AzureTableStore
from idemflow.stores.base import Check, Committed, Cond, Conflict, Delete, Increment, Insert, Op, Put, RowRef
from idemflow.testing.servers import AZURITE_KEY, Azurite
from tests.conftest import TEST_TABLES, make_factory

pytestmark = pytest.mark.cloud

HOSTILE_CHARS = "~/\\#?%'\"\x00\x1f\x7f\x85\x9f\u2028\u2029 +&=()@$:;,日🙂\ufeff\uffff"
keys_text = st.text(
    alphabet=st.one_of(st.sampled_from(HOSTILE_CHARS), st.characters(codec="utf-8")),
    max_size=24,
)


@pytest.fixture
def store(azurite: Azurite, request: pytest.FixtureRequest, tmp_path: Path) -> AzureTableStore:
    made = make_factory("azure", request, tmp_path)()
    assert isinstance(made, AzureTableStore)
    return made


def fresh_store(connection_string: str, **options: Any) -> AzureTableStore:
    """A store on its own prefix whose tables were never created."""
    return AzureTableStore(connection_string=connection_string, prefix=f"x{uuid.uuid4().hex[:10]}", **options)


def ref(key: str, partition: str = "p1", table: str = "accounts") -> RowRef:
    return RowRef(table, partition, key)


def put(r: RowRef, value: JSON, expect: Any = Cond.ANY) -> Put:
    return Put(r, value, encode(value), expect)


def insert(r: RowRef, value: JSON) -> Insert:
    return Insert(r, value, encode(value))


def raw(store: AzureTableStore, r: RowRef) -> dict[str, Any] | None:
    """The entity exactly as Azure holds it (tombstones included), or None."""
    try:
        entity = store.table_client(r.table).get_entity(ent.escape_key(r.partition), ent.escape_key(r.key))
    except ResourceNotFoundError:
        return None
    return dict(entity)


# -- escaping -------------------------------------------------------------------


@given(st.text(), st.text())
def test_escaping_is_injective_and_reversible(a: str, b: str) -> None:
    assert ent.unescape_key(ent.escape_key(a)) == a
    assert (ent.escape_key(a) == ent.escape_key(b)) == (a == b)
    for char in "/\\#?%\u2028\u2029" + "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)])):
        assert char not in ent.escape_key(a)


@given(st.lists(st.text(alphabet="~/%07EF2\x00\x7f", max_size=12), unique=True))
def test_escaping_keeps_escape_lookalikes_apart(texts: list[str]) -> None:
    """Texts made of the escape character, hex digits and escaped characters (the
    likeliest collisions) stay distinct."""
    assert len({ent.escape_key(text) for text in texts}) == len(texts)
    assert [ent.unescape_key(ent.escape_key(text)) for text in texts] == texts


def test_escape_character_is_itself_escaped() -> None:
    assert ent.escape_key("~002F") == "~007E002F"
    assert ent.escape_key("/") == "~002F"
    assert ent.escape_key("~002F") != ent.escape_key("/")


@settings(max_examples=25)
@given(st.lists(keys_text, min_size=1, max_size=4, unique=True))
def test_arbitrary_keys_and_partitions_round_trip_on_azurite(
    store: AzureTableStore, texts: list[str]
) -> None:
    table = "items"
    for index, text in enumerate(texts):
        assert store.commit([put(ref("d" + text, "p" + text, table), index)]) == Committed()
    wanted = {("p" + text, "d" + text) for text in texts}
    found = {(part, key): row for part, key, row in store.scan(table) if (part, key) in wanted}
    assert set(found) == wanted
    for index, text in enumerate(texts):
        r = ref("d" + text, "p" + text, table)
        row = store.read(r)
        assert row is not None and row.value == index
        assert [(p, k) for p, k, _ in store.scan(table, r.partition)] == [(r.partition, r.key)]
        assert store.commit([Delete(r, row.version)]) == Committed()
        assert store.read(r) is None


def test_scan_is_sorted_by_unescaped_keys(store: AzureTableStore) -> None:
    keys = ["d~", "d/", "da", "d%", "d\x01"]
    for key in keys:
        store.commit([put(ref(key), key)])
    assert [key for _, key, _ in store.scan("accounts", "p1")] == sorted(keys)


# -- values and limits ------------------------------------------------------------


def test_values_over_64_kib_are_chunked_and_round_trip(store: AzureTableStore) -> None:
    value: JSON = {"ascii": "x" * 70_000, "astral": "🙂" * 40_000, "text": "ünï" * 10_000}
    r = ref("dbig")
    assert store.commit([put(r, value)]) == Committed()
    row = store.read(r)
    assert row is not None and row.value == value
    entity = raw(store, r)
    assert entity is not None and entity["vn"] >= 4
    for index in range(entity["vn"]):
        assert isinstance(entity[f"v{index}"], bytes) and len(entity[f"v{index}"]) <= ent.CHUNK_BYTES


@pytest.mark.parametrize("char", ["x", "é", "\x7f", '"', "🙂", "\x00"])
def test_largest_declared_value_fits_whatever_its_characters(store: AzureTableStore, char: str) -> None:
    """The SDK sends non-ASCII and DEL as six-byte escapes; binary chunks make that irrelevant."""
    limit = store.capabilities.max_value_bytes
    per_char = len(encode(char * 2).encode()) - len(encode(char).encode())
    value = char * ((limit - 2) // per_char)
    assert limit - 20 <= len(encode(value).encode()) <= limit
    r = ref("dlargest")
    assert store.commit([put(r, value)]) == Committed()
    row = store.read(r)
    assert row is not None and row.value == value


@pytest.mark.parametrize("size", [450_001, 1_100_000])  # over the declared limit; and over 1 MiB stored
def test_a_value_over_the_declared_limit_is_refused_before_sending(store: AzureTableStore, size: int) -> None:
    """AZURE_CAPABILITIES.max_value_bytes (450,000: at most 900 KB as UTF-16) keeps an entity under 1 MiB."""
    before = store.round_trips
    with pytest.raises(LimitExceededError, match="450000"):
        store.commit([put(ref("dsmall"), 1), put(ref("dhuge"), "x" * size)])
    assert store.round_trips == before
    assert list(store.scan("accounts")) == []


def test_101_operations_are_refused_before_sending(store: AzureTableStore) -> None:
    ops: list[Op] = [put(ref(f"d{i}"), i) for i in range(101)]
    before = store.round_trips
    with pytest.raises(LimitExceededError, match="100"):
        store.commit(ops)
    assert store.round_trips == before
    assert list(store.scan("accounts")) == []
    assert store.commit(ops[:100]) == Committed()
    assert len(list(store.scan("accounts"))) == 100


def test_a_batch_over_the_declared_total_is_refused_before_sending(store: AzureTableStore) -> None:
    """AZURE_CAPABILITIES.max_commit_bytes (3 MB of text: 4 MB as base64) keeps a batch body under 4 MiB."""
    ops: list[Op] = [put(ref(f"d{i}"), '"' * 200_000) for i in range(10)]  # quotes double as JSON
    before = store.round_trips
    with pytest.raises(LimitExceededError, match="allows 3000000"):
        store.commit(ops)
    assert store.round_trips == before


def test_key_over_1_kib_after_escaping_is_refused(store: AzureTableStore) -> None:
    long_key = ref("d" + "/" * 120)  # 121 characters, 601 after escaping
    before = store.round_trips
    with pytest.raises(LimitExceededError, match="1024"):
        store.commit([put(long_key, 1)])
    with pytest.raises(LimitExceededError):
        store.read(long_key)
    with pytest.raises(LimitExceededError):
        store.commit([put(ref("dk", partition="p" + "x" * 600), 1)])
    assert store.round_trips == before
    assert store.commit([put(ref("d" + "x" * 511), 1)]) == Committed()  # 512 UTF-16 units: the limit


def test_one_partition_and_one_op_per_row(store: AzureTableStore) -> None:
    with pytest.raises(BackendError, match="one table and partition"):
        store.commit([put(ref("da", "p1"), 1), put(ref("db", "p2"), 2)])
    with pytest.raises(BackendError, match="two operations"):
        store.commit([put(ref("da"), 1), Check(ref("da"), Cond.ABSENT)])


# -- failures ---------------------------------------------------------------------


def test_missing_table_names_the_table_and_the_fix(azurite: Azurite) -> None:
    store = fresh_store(azurite.connection_string)
    try:
        for action in (lambda: store.read(ref("da")), lambda: store.commit([put(ref("da"), 1)])):
            with pytest.raises(BackendError) as caught:
                action()
            assert not isinstance(caught.value, TransientError)
            message = str(caught.value)
            assert store.prefix + "accounts" in message and "idemflow tables create" in message
        store.create_tables("accounts")
        assert store.commit([put(ref("da"), 1)]) == Committed()
    finally:
        store.close()


def test_bad_credentials_never_show_the_key(azurite: Azurite, caplog: pytest.LogCaptureFixture) -> None:
    wrong_key = base64.b64encode(b"not the azurite key, but valid base64 of 64 bytes" + b"!" * 14).decode()
    connection_string = azurite.connection_string.replace(AZURITE_KEY, wrong_key)
    store = fresh_store(connection_string)
    try:
        actions = (
            lambda: store.create_tables("accounts"),
            lambda: store.read(ref("da")),
            lambda: store.commit([put(ref("da"), 1)]),
        )
        for action in actions:
            with pytest.raises(BackendError) as caught:
                action()
            message = str(caught.value)
            assert not isinstance(caught.value, TransientError)
            assert "connection string" in message and "AccountKey" in message
            for secret in (wrong_key, wrong_key[:20], AZURITE_KEY, connection_string):
                assert secret not in message
        with caplog.at_level(logging.DEBUG, logger="idemflow.stores.azure_tables"):
            store.commit_cache([put(ref("rcache", table="idemflowruns"), 1)])
            store.flush()
        assert "dropped a cache write" in caplog.text and wrong_key[:20] not in caplog.text
    finally:
        store.close()


def test_connection_refused_is_transient_and_fast(azurite: Azurite) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens
    connection_string = azurite.connection_string.replace(str(azurite.table_port), str(port))
    store = fresh_store(connection_string, retry_total=0, connection_timeout=2, read_timeout=2)
    started = time.monotonic()
    try:
        with pytest.raises(TransientError):
            store.read(ref("da"))
        with pytest.raises(TransientError):
            store.commit([put(ref("da"), 1)])
    finally:
        store.close()
    assert time.monotonic() - started < 5


def test_lost_answer_then_retry_meets_its_own_memo(
    store: AzureTableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo, data = ref("mwf|req|s1"), ref("dbalance")
    store.commit([put(data, 10)])
    seen = store.read(data)
    assert seen is not None
    client = store.table_client("accounts")
    real_submit = client.submit_transaction
    lost: list[bool] = []

    def answer_lost_once(operations: Any, **kwargs: Any) -> Any:
        result = real_submit(operations, **kwargs)  # the server applies the batch ...
        if not lost:
            lost.append(True)
            raise ServiceResponseError("connection reset before the answer arrived")  # ... the answer is lost
        return result

    monkeypatch.setattr(client, "submit_transaction", answer_lost_once)
    ops: list[Op] = [insert(memo, {"result": 7}), put(data, 3, seen.version)]
    with pytest.raises(TransientError):
        store.commit(ops)
    outcome = store.commit(ops)
    assert isinstance(outcome, Conflict)
    first = outcome.failures[0]
    assert first.index == 0 and first.existing is not None and first.existing.value == {"result": 7}
    row = store.read(data)
    assert row is not None and row.value == 3


def test_failure_index_and_existing_row_in_a_larger_commit(store: AzureTableStore) -> None:
    memo = ref("mmemo")
    store.commit([insert(memo, "old")])
    before = store.round_trips
    outcome = store.commit([put(ref("da"), 1), put(ref("db"), 2), insert(memo, "new")])
    assert isinstance(outcome, Conflict)
    assert outcome.failures[0].index == 2
    existing = outcome.failures[0].existing
    assert existing is not None and existing.value == "old"
    assert store.round_trips - before == 2  # the batch, then the read of the existing memo
    assert store.read(ref("da")) is None


# -- tombstones -------------------------------------------------------------------


def test_check_absent_leaves_a_tombstone_that_causes_no_false_conflict(store: AzureTableStore) -> None:
    r, target = ref("dlater"), ref("dtarget")
    assert store.read(r) is None
    assert store.commit([Check(r, Cond.ABSENT), put(target, 1)]) == Committed()
    tombstone = raw(store, r)
    assert tombstone is not None and tombstone.get("tomb") is True
    assert store.read(r) is None
    assert all(key != r.key for _, key, _ in store.scan("accounts"))
    assert store.commit([Check(r, Cond.ABSENT), put(target, 2)]) == Committed()  # over the tombstone
    before = store.round_trips
    assert store.commit([put(r, "created", Cond.ABSENT)]) == Committed()
    assert store.round_trips - before == 1  # the tombstone's ETag was remembered from the last commit
    row = store.read(r)
    assert row is not None and row.value == "created"
    assert "tomb" not in (raw(store, r) or {})
    assert isinstance(store.commit([put(r, "again", Cond.ABSENT)]), Conflict)


def test_stale_tombstone_hints_neither_conflict_falsely_nor_hide_a_row(
    store: AzureTableStore, azurite: Azurite
) -> None:
    moved, taken = ref("dmoved"), ref("dtaken")
    store.commit([Check(moved, Cond.ABSENT), Check(taken, Cond.ABSENT)])  # this store remembers both
    other = AzureTableStore(connection_string=azurite.connection_string, prefix=store.prefix)
    try:
        assert other.commit([Check(moved, Cond.ABSENT)]) == Committed()  # a new tombstone ETag
        assert other.commit([insert(taken, "theirs")]) == Committed()  # a real row over the tombstone
    finally:
        other.close()
    assert store.commit([put(moved, "mine", Cond.ABSENT)]) == Committed()
    outcome = store.commit([insert(taken, "mine")])
    assert isinstance(outcome, Conflict) and outcome.failures[0].existing is not None
    assert outcome.failures[0].existing.value == "theirs"


def test_insert_over_a_tombstone_succeeds(store: AzureTableStore) -> None:
    memo = ref("mmemo")
    store.commit([Delete(memo, Cond.ABSENT)])
    assert raw(store, memo) is not None
    assert store.commit([insert(memo, {"r": 1})]) == Committed()
    row = store.read(memo)
    assert row is not None and row.value == {"r": 1}
    outcome = store.commit([insert(memo, {"r": 2})])
    assert isinstance(outcome, Conflict) and outcome.failures[0].existing == row


def test_check_absent_conflicts_with_a_concurrent_create(store: AzureTableStore, azurite: Azurite) -> None:
    r, target = ref("draced"), ref("dtarget")
    assert store.read(r) is None  # the step reads the row as absent ...
    other = AzureTableStore(connection_string=azurite.connection_string, prefix=store.prefix)
    try:
        assert other.commit([insert(r, "theirs")]) == Committed()  # ... another writer creates it ...
    finally:
        other.close()
    outcome = store.commit([Check(r, Cond.ABSENT), put(target, 1)])  # ... so the step must conflict
    assert isinstance(outcome, Conflict) and outcome.failures[0].index == 0
    assert store.read(target) is None


def test_blind_delete_removes_a_row_and_makes_an_absent_one_a_tombstone(store: AzureTableStore) -> None:
    here, never = ref("dhere"), ref("dnever")
    store.commit([put(here, 1)])
    assert store.commit([Delete(here), Delete(never), put(ref("dother"), 3)]) == Committed()
    assert raw(store, here) is None
    tombstone = raw(store, never)
    assert tombstone is not None and tombstone.get("tomb") is True
    assert store.read(never) is None
    assert store.commit([Delete(never)]) == Committed()


# -- increments -------------------------------------------------------------------


def test_increment_from_absent_and_over_a_tombstone(store: AzureTableStore) -> None:
    counter = ref("dcount")
    store.commit([Check(counter, Cond.ABSENT)])
    assert store.commit([Increment(counter, 2)]) == Committed()
    row = store.read(counter)
    assert row is not None and row.value == 2


def test_increment_of_a_non_number_names_the_row(store: AzureTableStore) -> None:
    text = ref("dtext", partition="acct7")
    store.commit([put(text, [1])])
    with pytest.raises(InvalidValueError, match="accounts/acct7"):
        store.commit([Increment(text, 1)])


def test_concurrent_increments_all_count(store: AzureTableStore) -> None:
    counter = ref("dcount")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def bump() -> None:
        barrier.wait()
        try:
            for _ in range(20):
                assert store.commit([Increment(counter, 1)]) == Committed()
        except (AssertionError, BackendError) as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=bump) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    row = store.read(counter)
    assert row is not None and row.value == 40


def test_increment_retries_only_itself_when_its_row_moved(store: AzureTableStore) -> None:
    counter, guard = ref("dcount"), ref("dguard")
    store.commit([put(counter, 5), put(guard, "g")])
    seen = store.read(guard)
    assert seen is not None
    store.commit([put(guard, "moved")])
    outcome = store.commit([Increment(counter, 1), Check(guard, seen.version)])
    assert isinstance(outcome, Conflict) and outcome.failures[0].index == 1  # a read dependency: no retry
    row = store.read(counter)
    assert row is not None and row.value == 5


# -- configuration ------------------------------------------------------------------


def test_open_store_from_url_and_environment(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = f"u{uuid.uuid4().hex[:8]}"
    url = f"azure:?connection_string={quote(azurite.connection_string, safe='')}&prefix={prefix}"
    from_url = open_store(url)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    from_env = open_store(f"azure:?prefix={prefix}")
    try:
        assert isinstance(from_url, AzureTableStore) and isinstance(from_env, AzureTableStore)
        from_url.create_tables(*TEST_TABLES)
        assert from_url.commit([put(ref("da"), "shared")]) == Committed()
        row = from_env.read(ref("da"))
        assert row is not None and row.value == "shared"
    finally:
        from_url.close()
        from_env.close()


def test_commit_cache_is_off_the_callers_thread(store: AzureTableStore) -> None:
    r = ref("rcache", table="idemflowruns")
    store.commit_cache([put(r, {"status": "completed"})])
    store.flush()
    row = store.read(r)
    assert row is not None and row.value == {"status": "completed"}
    store.close()
    store.commit_cache([put(r, "after close")])  # dropped, never raises


def test_tables_lists_this_prefix_right_after_creation(azurite: Azurite) -> None:
    """``list_tables`` right after ``create_table`` was once reported empty: it is not."""
    store = fresh_store(azurite.connection_string)
    neighbour = AzureTableStore(connection_string=azurite.connection_string, prefix=store.prefix + "x")
    try:
        assert store.tables() == []
        store.create_tables("ledger", "accounts")
        assert store.tables() == ["accounts", "idemflowruns", "ledger"]
        neighbour.create_tables("items")
        assert "items" not in store.tables() and "xitems" in store.tables()  # prefixes are plain strings
    finally:
        store.close()
        neighbour.close()


# -- retention: the store's own expiry ------------------------------------------------------------


def test_expiry_deletes_tombstones(store: AzureTableStore) -> None:
    """A blind delete of an absent row leaves a tombstone (``expires_at`` = now): a sweep removes it."""
    gone = ref("dgone", "tomb")
    store.commit([Delete(gone)])
    tomb = raw(store, gone)
    assert tomb is not None and tomb.get(ent.TOMB) is True
    report = store.expire(now=float(tomb[ent.EXPIRES_AT]) + 1)
    assert report.deleted >= 1 and raw(store, gone) is None


def test_expiry_pages_resume_where_the_last_sweep_stopped(store: AzureTableStore) -> None:
    """One page per table per sweep, resumed from the store's continuation token: rows a sweep
    leaves alone (rows that are not bookkeeping) do not hide the rows after them forever."""
    for partition in ("a", "b", "c"):  # data rows never expire; these carry expires_at all the same
        store.commit([Put(ref("dk", partition, "items"), 1, "1", expires_at=100.0)])
    orphan = ref("mwf|gone|s1", "z", "items")  # a memo whose request has no run record
    store.commit([Insert(orphan, {"id": "atomic a", "v": 1}, encode({"id": "atomic a", "v": 1}), 100.0)])
    first = store.expire(now=1e9, limit=2)
    assert (first.found, first.deleted) == (2, 0) and raw(store, orphan) is not None
    second = store.expire(now=1e9, limit=2)
    assert (second.found, second.deleted) == (2, 1) and raw(store, orphan) is None
    assert [raw(store, ref("dk", partition, "items")) is not None for partition in "abc"] == [True] * 3
