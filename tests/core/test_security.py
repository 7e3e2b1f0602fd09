"""Hostile input: key spaces never collide, bad values fail before any write,
forged queue messages never run (secrets in errors and logs: :mod:`tests.core.test_secrets`).

Names, partitions, keys and request ids come from hypothesis, built from the
characters that matter — the key separators ``|`` and ``%``, the Azure escape
``~`` and its forbidden ``/ \\ # ?``, control characters, unicode beyond the
BMP — at every length up to the limits. After each run the store is scanned:
the user rows are exactly those the user wrote, and every memo and run record
sits exactly where the engine puts it.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from idemflow import (
    Idem,
    IdemflowError,
    InvalidInputError,
    InvalidNameError,
    InvalidValueError,
    LimitExceededError,
    MessageRejectedError,
    Tx,
    atomic,
    checkpoint,
    run,
    workflow,
)
from idemflow.admin import RunRecord, collect
from idemflow.async_worklist.messages import decode_pointer
from idemflow.async_worklist.queues.base import Message
from idemflow.client import RunStatus, rows, submit
from idemflow.keys import MAX_ID_CHARS, MAX_KEY_CHARS, RUNS_TABLE, memo_key, run_key, step_tag
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.stores.base import RowRef
from idemflow.worker import MemoryQueue, SqliteQueue, Worker
from tests.conftest import make_factory
from tests.core.test_secrets import SECRET
from tests.support.async_workflows import survey
from tests.support.selection import kinds

# -- hostile text -------------------------------------------------------------------------------

SPECIAL = "|%~/\\#?\x00\x01\x1f\x7f\x85\u2028\u2029\ufeff\ufffe\uffff '\"\t\n\r%7C%25~0023dmr"
hostile_chars = st.one_of(
    st.sampled_from(list(SPECIAL)),
    st.characters(blacklist_categories=("Cs",)),  # any code point but lone surrogates
    st.sampled_from(["é", "中", "😀", "\U0010fffd"]),
)


def hostile(limit: int) -> st.SearchStrategy[str]:
    """Short hostile text, or text at (or one below) the length limit."""
    return st.one_of(
        st.text(hostile_chars, min_size=1, max_size=12),
        st.sampled_from(["m", "r", "d", "|", "%", "~", "mwf|req|s1", "rhostile.wf-1", "%7C", "s1"]),
        st.text(hostile_chars, min_size=limit - 1, max_size=limit),
    )


partitions = hostile(MAX_ID_CHARS)
request_ids = hostile(MAX_ID_CHARS)
keys = hostile(MAX_KEY_CHARS)

WF = "hostile.wf-1"
"""A legal workflow name using every punctuation character names may hold."""


def writer(partition: str, keys: list[str]) -> Idem[Any]:
    @workflow(WF)
    def write_all(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        def put_all(tx: Tx) -> list[str]:
            for key in req["keys"]:
                tx.put(key, {"key": key, "partition": req["partition"]})
            return list(req["keys"])

        written = yield atomic("tablea", req["partition"], put_all, name="put")
        seen = yield atomic("tableb", req["partition"], lambda tx: tx.get(req["keys"][0]), name="get")
        return {"written": written, "seen": seen}

    return write_all({"partition": partition, "keys": keys})


def rows_at(store: Store, places: list[tuple[str, str]]) -> tuple[dict[Any, Any], set[tuple[str, str, str]]]:
    """Data rows and bookkeeping keys of the given (table, partition) places."""
    data, bookkeeping = {}, set()
    for table, partition in places:
        for part, key, row in store.scan(table, partition):
            if key.startswith("d"):
                data[(table, part, key[1:])] = row.value
            else:
                bookkeeping.add((table, part, key))
    return data, bookkeeping


def check_key_spaces(store: Store, partition: str, user_keys: list[str], request_id: str) -> None:
    """Run the writer twice, then every row must be exactly where it belongs."""
    user_keys = list(dict.fromkeys(user_keys))
    places = [("tablea", partition), ("tableb", partition), (RUNS_TABLE, request_id)]
    try:
        first = run(writer(partition, user_keys), request_id=request_id, store=store)
    except LimitExceededError:
        # Too long for this backend once escaped: refused before the step wrote anything.
        data, bookkeeping = rows_at(store, places)
        assert data == {}
        assert not {ref for ref in bookkeeping if ref[2].startswith("m")}
        return
    assert run(writer(partition, user_keys), request_id=request_id, store=store) == first
    assert first == {"written": user_keys, "seen": None}
    store.flush()
    data, bookkeeping = rows_at(store, places)
    assert data == {("tablea", partition, k): {"key": k, "partition": partition} for k in user_keys}
    assert bookkeeping == {
        ("tablea", partition, memo_key(WF, request_id, step_tag(1))),
        ("tableb", partition, memo_key(WF, request_id, step_tag(2))),
        (RUNS_TABLE, request_id, run_key(WF)),
    }
    record = RunRecord.from_json(store.read(RowRef(RUNS_TABLE, request_id, run_key(WF))).value)  # type: ignore[union-attr]
    assert record.status is RunStatus.COMPLETED and record.result == first


_numbers = itertools.count()


@pytest.fixture(params=kinds("memory", "sqlite"))
def local_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    return make_factory(str(request.param), request, tmp_path)


@given(partition=partitions, user_keys=st.lists(keys, min_size=1, max_size=3), request_id=request_ids)
@settings(max_examples=60)
def test_hostile_names_stay_in_their_key_space_on_local_stores(
    local_factory: Callable[[], Store], partition: str, user_keys: list[str], request_id: str
) -> None:
    store = local_factory()
    check_key_spaces(store, partition, user_keys, request_id)
    # On a fresh store nothing exists anywhere else either.
    everything = {(table, part, key) for table in store.tables() for part, key, _ in store.scan(table)}
    expected = {(t, p, "d" + k) for t, p, k in rows_at(store, [("tablea", partition)])[0]}
    assert everything - expected == rows_at(store, [("tablea", partition), ("tableb", partition)])[1] | {
        (RUNS_TABLE, request_id, run_key(WF))
    }
    store.close()


@pytest.fixture(params=kinds("dynamodb", "azure"))
def cloud_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_factory(str(request.param), request, tmp_path)()


@given(partition=partitions, user_keys=st.lists(keys, min_size=1, max_size=2), request_id=request_ids)
@settings(max_examples=12)
def test_hostile_names_stay_in_their_key_space_on_cloud_stores(
    cloud_store: Store, partition: str, user_keys: list[str], request_id: str
) -> None:
    # One store for all examples: a unique tail keeps examples apart and the text hostile.
    tail = f"|{next(_numbers)}"
    partition = partition[: MAX_ID_CHARS - len(tail)] + tail
    request_id = request_id[: MAX_ID_CHARS - len(tail)] + tail
    check_key_spaces(cloud_store, partition, user_keys, request_id)


def test_user_rows_that_mimic_bookkeeping_never_touch_it(local_factory: Callable[[], Store]) -> None:
    store = local_factory()
    request_id = "r|1%7C"
    forged = [memo_key(WF, request_id, step_tag(1)), memo_key(WF, request_id, step_tag(2)), run_key(WF)]

    @workflow("mimic")
    def mimic(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        # Rows keyed like memos and run records, in the run records' own table and partition.
        def forge(tx: Tx) -> str:
            for key in forged:
                tx.put(key, {"fp": "forged", "status": "completed", "result": "forged"})
            return "ok"

        yield atomic(RUNS_TABLE, request_id, forge)
        yield atomic("tablea", "p", forge)
        return "real"

    for _ in range(3):
        assert run(mimic({}), request_id=request_id, store=store) == "real"
    store.flush()  # the completion record is a cache write, maybe still queued
    record = RunRecord.from_json(store.read(RowRef(RUNS_TABLE, request_id, run_key("mimic"))).value)  # type: ignore[union-attr]
    assert record.result == "real" and record.fingerprint != "forged"
    assert store.read(RowRef(RUNS_TABLE, request_id, run_key(WF))) is None
    assert {key for _, key, _ in store.scan("tablea")} == {"d" + k for k in forged} | {
        memo_key("mimic", request_id, step_tag(2))
    }


@given(name=st.text(hostile_chars, min_size=0, max_size=110))
@settings(max_examples=150)
def test_workflow_names_are_legal_or_refused(name: str) -> None:
    try:
        flow = workflow(name)(  # two steps: a one-step request's run record replaces its memo
            lambda: atomic("tablea", "p", lambda tx: tx.increment("n")).then(
                atomic("tableb", "p", lambda tx: tx.increment("n"))
            )
        )
    except InvalidNameError:
        legal = False
    else:
        legal = True
        store = MemoryStore()
        run(flow(), request_id="r", store=store)
        memos = [key for _, key, _ in store.scan("tablea") if key.startswith("m")]
        assert memos == [memo_key(name, "r", step_tag(1))] and "|" not in name and "%" not in name
    assert legal == (
        name.isascii()
        and 1 <= len(name) <= 100
        and (name[0].isalpha() or name[0] == "_")
        and all(c.isalnum() or c in "_.-" for c in name)
    )


@pytest.mark.parametrize(
    ("what", "make"),
    [
        ("empty request id", lambda: ("", "p", "k")),
        ("long request id", lambda: ("x" * (MAX_ID_CHARS + 1), "p", "k")),
        ("surrogate request id", lambda: ("a\ud800", "p", "k")),
        ("non-str request id", lambda: (7, "p", "k")),
        ("empty partition", lambda: ("r", "", "k")),
        ("long partition", lambda: ("r", "é" * (MAX_ID_CHARS + 1), "k")),
        ("surrogate partition", lambda: ("r", "\udfff", "k")),
        ("empty key", lambda: ("r", "p", "")),
        ("long key", lambda: ("r", "p", "k" * (MAX_KEY_CHARS + 1))),
        ("surrogate key", lambda: ("r", "p", "\ud83d")),
        ("bytes key", lambda: ("r", "p", b"k")),
    ],
)
def test_illegal_names_are_refused_before_any_write(
    local_factory: Callable[[], Store], what: str, make: Callable[[], tuple[Any, Any, Any]]
) -> None:
    store = local_factory()
    request_id, partition, key = make()
    with pytest.raises(InvalidNameError):
        run(atomic("tablea", partition, lambda tx: tx.put(key, 1)), request_id=request_id, store=store)
    assert store.tables() == []


def test_names_at_the_limits_work(local_factory: Callable[[], Store]) -> None:
    store = local_factory()
    request_id, partition, key = "😀" * MAX_ID_CHARS, "|" * MAX_ID_CHARS, "%" * MAX_KEY_CHARS
    run(atomic("tablea", partition, lambda tx: tx.put(key, 1)), request_id=request_id, store=store)
    assert run(atomic("tablea", partition, lambda tx: tx.get(key)), request_id="other", store=store) == 1


# -- values ---------------------------------------------------------------------------------------


class Text(str):
    """A str subclass: it would come back as a plain str."""


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_VALUES = {
    "tuple": (1, 2),
    "set": {1},
    "int key": {1: "a"},
    "tuple key": {(1,): "a"},
    "nan": float("nan"),
    "infinity": float("-inf"),
    "bytes": b"x",
    "object": object(),
    "str subclass": Text("x"),
    "deep": nested(65),
    "deep dict": json.loads('{"a":' * 70 + "1" + "}" * 70),
}


def places_of_a_value(value: Any) -> dict[str, Callable[[], Idem[Any]]]:
    @workflow("carry")
    def carry(given: Any) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", "p", lambda tx: tx.put("k", 1))

    return {
        "row": lambda: atomic("tablea", "p", lambda tx: tx.put("k", value)),
        "result": lambda: atomic("tablea", "p", lambda tx: value),
        "input": lambda: carry(value),
        "abort reason": lambda: atomic("tablea", "p", lambda tx: tx.abort(value)),
    }


@pytest.mark.parametrize("kind", sorted(BAD_VALUES))
def test_values_that_are_not_json_are_refused_before_any_write(
    local_factory: Callable[[], Store], kind: str
) -> None:
    store = local_factory()
    for where, make in places_of_a_value(BAD_VALUES[kind]).items():
        with pytest.raises(InvalidValueError) as caught:
            run(make(), request_id=f"r-{where}", store=store)
        assert str(caught.value), where
        assert store.tables() == [], where


def test_deepest_accepted_value_round_trips(local_factory: Callable[[], Store]) -> None:
    store = local_factory()
    deep = nested(64)
    run(atomic("tablea", "p", lambda tx: tx.put("k", deep)), request_id="r", store=store)
    assert run(atomic("tablea", "p", lambda tx: tx.get("k") == deep), request_id="s", store=store)


def test_deepest_accepted_value_is_also_a_valid_step_result() -> None:
    deep = nested(64)
    assert run(atomic("tablea", "p", lambda tx: deep), request_id="r", store=MemoryStore()) == deep


@workflow("carry")
def carry(value: Any) -> Generator[Idem[Any], Any, Any]:
    """Hands its input through a step, a checkpoint and another step."""
    first = yield atomic("tablea", "p", lambda tx: value)
    yield checkpoint()
    return (yield atomic("tablea", "q", lambda tx: first))


def test_deepest_accepted_value_is_a_valid_input_and_message_value() -> None:
    deep = nested(64)
    assert run(carry(deep), request_id="sync", store=MemoryStore()) == deep
    store, queue = MemoryStore(), MemoryQueue()
    pending = submit(carry(deep), request_id="async", store=store, queue=queue, signing_key=KEY)
    [message] = queue.receive()
    Worker([carry], store=store, queue=queue, signing_key=KEY).handle(message)
    assert queue.dead_letters() == []
    assert pending.result(timeout=0) == deep
    with pytest.raises(InvalidValueError, match="nested deeper than 64"):
        run(carry(nested(65)), request_id="too-deep", store=store)
    assert run_status(store, "carry", "too-deep") is None


json_or_not = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=5),
        st.sampled_from([(1,), b"b", Text("t"), {2}]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)


@given(value=json_or_not)
@settings(max_examples=150)
def test_a_value_is_either_refused_unwritten_or_read_back_exactly(value: Any) -> None:
    store = MemoryStore()
    try:
        run(atomic("tablea", "p", lambda tx: tx.put("k", value)), request_id="r", store=store)
    except InvalidValueError:
        assert store.tables() == []
        return
    back = run(atomic("tablea", "p", lambda tx: tx.get("k")), request_id="s", store=store)
    assert identical(back, value)


def identical(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (no tuple became a list, no 1.0 a 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_oversize_values_are_refused_before_any_write(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "big.sqlite3")
    too_big = "x" * (store.capabilities.max_value_bytes + 1)
    with pytest.raises(LimitExceededError, match="bytes"):
        run(atomic("tablea", "p", lambda tx: tx.put("k", too_big)), request_id="r", store=store)
    assert store.tables() == []
    store.close()


@pytest.mark.parametrize("kind", kinds("dynamodb", "azure"))
def test_oversize_values_are_refused_by_cloud_stores_before_any_write(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = make_factory(kind, request, tmp_path)()
    too_big = "é" * (store.capabilities.max_value_bytes // 2 + 1)
    for make in (
        lambda: atomic("tablea", "p", lambda tx: tx.put("k", too_big)),
        lambda: atomic("tablea", "p", lambda tx: too_big),
    ):
        with pytest.raises(LimitExceededError):
            run(make(), request_id="r", store=store)
        assert rows_at(store, [("tablea", "p")]) == ({}, set())


# -- queue messages -------------------------------------------------------------------------------

KEY = b"security-key"


@pytest.fixture
def submitted() -> Iterator[tuple[Store, str, Message]]:
    """A request submitted for real (one step before its checkpoint) and its genuine message."""
    store = MemoryStore()
    queue = MemoryQueue()
    response = {"space": "", "user": "u", "answer": "yes", "at": [1]}
    submit(survey(response), request_id="genuine", store=store, queue=queue, signing_key=KEY)
    [message] = queue.receive()
    yield store, "genuine", message


def deliver(store: Store, bodies: list[str], key: bytes | None = KEY, rounds: int = 12) -> MemoryQueue:
    """Deliver each body to a worker until none is left, with time moving on for retries."""
    now = [0.0]
    queue = MemoryQueue(clock=lambda: now[0])
    for body in bodies:
        queue.send(body)
    worker = Worker([survey], store=store, queue=queue, signing_key=key, max_deliveries=3)
    for _ in range(rounds * max(len(bodies), 1)):
        received = queue.receive()
        if not received:
            if queue.approximate_size() == 0:
                break
            now[0] += 60
            continue
        worker.handle(received[0])
    assert queue.approximate_size() == 0
    return queue


def counted(store: Store) -> Any:
    return {key: value for (_, key), value in rows(store, "tableb", "summary").items()}


@given(cut=st.integers(min_value=0, max_value=10_000))
@settings(max_examples=40)
def test_truncated_messages_are_refused(submitted: tuple[Store, str, Message], cut: int) -> None:
    store, _, message = submitted
    queue = deliver(store, [message.body[: cut % len(message.body)]])
    assert [reason[:8] for _, reason in queue.dead_letters()] == ["rejected"]
    assert counted(store) == {}


@given(index=st.integers(min_value=0, max_value=10_000), char=hostile_chars)
@settings(max_examples=60)
def test_altered_messages_are_refused_or_mean_the_same(
    submitted: tuple[Store, str, Message], index: int, char: str
) -> None:
    store, _, message = submitted
    body = message.body
    index %= len(body)
    assume(body[index] != char)
    altered = body[:index] + char + body[index + 1 :]
    try:
        same = decode_pointer(altered, KEY) == decode_pointer(body, KEY)
    except IdemflowError:
        same = False
    before = counted(store)  # the store is shared by the examples of this test
    queue = deliver(store, [altered])
    assert same or len(queue.dead_letters()) == 1  # never executed
    assert counted(store) == ({"yes": 1} if same else before)


@pytest.mark.parametrize(
    "forge",
    [
        lambda sig: "é" + sig[1:],
        lambda sig: "\ud800" + sig[1:],  # a lone surrogate: json.loads makes one from "\ud800"
        lambda sig: "\uff10" + sig[1:],  # a full-width digit zero: a digit, but not ASCII
        lambda sig: sig.upper(),
        lambda sig: sig + "0",
        lambda sig: sig[:-1],
        lambda sig: "",
        lambda sig: 7,
        lambda sig: [sig],
    ],
    ids=[
        "non-ascii",
        "lone surrogate",
        "full-width digit",
        "upper case",
        "long",
        "short",
        "empty",
        "int",
        "list",
    ],
)
def test_a_signature_with_non_ascii_characters_is_rejected_at_once(
    submitted: tuple[Store, str, Message], forge: Callable[[str], object]
) -> None:
    store, _, message = submitted
    raw = json.loads(message.body)
    raw["sig"] = forge(raw["sig"])
    body = json.dumps(raw)  # ensure_ascii: a lone surrogate survives only this way
    with pytest.raises(MessageRejectedError, match="signature"):
        decode_pointer(body, KEY)
    queue = deliver(store, [body])
    assert [reason for _, reason in queue.dead_letters()] == [
        "rejected: signature is not an HMAC-SHA256 in 64 lowercase hex digits"
    ]
    assert counted(store) == {}


def test_replayed_messages_take_effect_once(submitted: tuple[Store, str, Message]) -> None:
    store, _, message = submitted
    queue = deliver(store, [message.body] * 4)
    assert queue.dead_letters() == [] and counted(store) == {"yes": 1}
    queue = deliver(store, [message.body])  # long after it finished
    assert counted(store) == {"yes": 1}
    # A replay signed for this request cannot be pointed at another one.
    moved = json.loads(message.body)
    moved["request_id"] = "another"
    queue = deliver(store, [json.dumps(moved)])
    assert "signature" in queue.dead_letters()[0][1]
    # After garbage collection the request is forgotten: a replay is refused, not rerun.
    collect(store, older_than=0.0, now=lambda: 1e12)
    queue = deliver(store, [message.body])
    assert "was submitted" in queue.dead_letters()[0][1] and counted(store) == {"yes": 1}


def test_unsigned_workers_ignore_forged_step_values(submitted: tuple[Store, str, Message]) -> None:
    """A format-1 message (from before pointers) carrying forged step values: they are never used."""
    store, request_id, _ = submitted
    record = run_status(store, "survey", request_id)
    assert record is not None and isinstance(record.input, dict)
    forged = {
        "v": 1,
        "workflow": "survey",
        "request_id": request_id,
        "input": {k: v for k, v in record.input.items() if k != "rn"},  # as format 1 carried it
        "recorded": [["s1", "atomic record", "no"]],
    }
    deliver(store, [json.dumps(forged)], key=None)
    assert counted(store) == {"yes": 1}  # the memo's "yes", not the carried "no"


@pytest.mark.parametrize(
    "change",
    [
        {"input": {"args": [{"answer": float("nan")}], "kwargs": {}}},
        {"request_id": "x" * (MAX_ID_CHARS + 1)},
        {"request_id": "\ud800"},
        {"workflow": "survey\x00"},
        {"c": [0, "ab"]},
        {"c": [True, "ab"]},
        {"c": [1, ""]},
        {"c": [1, "x" * 33]},
        {"c": "1.ab"},
    ],
    ids=[
        "nan input",
        "long request id",
        "surrogate request id",
        "nul in name",
        "continuation zero",
        "continuation bool",
        "continuation no nonce",
        "continuation long nonce",
        "continuation not a list",
    ],
)
def test_malformed_but_parseable_messages_never_run(
    submitted: tuple[Store, str, Message], change: Any
) -> None:
    store, _, message = submitted
    raw = {**json.loads(message.body), **change}
    raw.pop("sig")
    body = json.dumps(raw, ensure_ascii=True)  # NaN and lone surrogates survive only this way
    queue = deliver(store, [body], key=None)
    [(_, reason)] = queue.dead_letters()
    assert reason.startswith("rejected: ") and counted(store) == {}  # at once, not after retries


@pytest.mark.parametrize("queue_kind", ["memory", "sqlite"])
def test_oversize_messages_are_refused_before_sending(queue_kind: str, tmp_path: Path) -> None:
    queue = MemoryQueue() if queue_kind == "memory" else SqliteQueue(tmp_path / "q.sqlite3")
    with pytest.raises(LimitExceededError):
        queue.send("x" * (queue.max_body_bytes + 1))
    with pytest.raises(LimitExceededError):
        queue.send("é" * (queue.max_body_bytes // 2 + 1))
    assert queue.approximate_size() == 0
    queue.close()


def test_workers_never_log_the_signing_key(
    submitted: tuple[Store, str, Message], caplog: pytest.LogCaptureFixture
) -> None:
    store, _, message = submitted
    secret_key = SECRET.encode()
    with caplog.at_level(logging.DEBUG):
        queue = deliver(store, [message.body, "{", message.body.replace('"yes"', '"no"')], key=secret_key)
    assert len(queue.dead_letters()) == 3
    assert SECRET not in caplog.text and all(SECRET not in reason for _, reason in queue.dead_letters())


def test_errors_on_hostile_input_say_what_and_where() -> None:
    store = MemoryStore()
    with pytest.raises(InvalidInputError) as caught:
        run(atomic("tablea", "p", lambda tx: tx.put("k", {1, 2})), request_id="r", store=store)
    assert "tablea/p/k" in str(caught.value) and "set" in str(caught.value)


def test_messages_with_invalid_input_are_rejected_at_first_delivery(
    submitted: tuple[Store, str, Message],
) -> None:
    store, _, message = submitted
    raw = {**json.loads(message.body), "request_id": "x" * (MAX_ID_CHARS + 1)}
    raw.pop("sig")
    queue = deliver(store, [json.dumps(raw)], key=None)
    assert queue.dead_letters()[0][1].startswith("rejected: invalid request id")


@pytest.mark.exact_calls
def test_a_stale_read_cannot_commit_after_delete_and_recreate(store: Store) -> None:
    """A row deleted and created again must not look unchanged to a body that read it before."""
    from idemflow.stores.base import Conflict, Delete, Put

    ref = RowRef("accounts", f"aba{uuid.uuid4().hex[:6]}", "dbalance")
    store.commit([Put(ref, 1, "1")])
    read = store.read(ref)
    assert read is not None
    store.commit([Delete(ref)])
    store.commit([Put(ref, 99, "99")])
    assert isinstance(store.commit([Put(ref, 2, "2", read.version)]), Conflict)
