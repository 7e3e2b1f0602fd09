"""Key spaces never collide: no user key, partition, table, workflow or request id
can reach a memo or run row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow import InvalidNameError, Tx, atomic, run, workflow
from idemflow.keys import (
    check_request_id,
    compensation_tag,
    data_key,
    event_key,
    inbox_key,
    memo_key,
    parse_memo_key,
    parse_published_key,
    run_key,
    step_tag,
    stream_end_key,
    stream_key,
    user_key,
)
from idemflow.stores import MemoryStore

text = st.text(min_size=1, max_size=30)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,20}", fullmatch=True)


@given(a=text, b=text)
def test_data_keys_are_injective_and_never_memo_or_run_keys(a: str, b: str) -> None:
    assert (data_key(a) == data_key(b)) == (a == b)
    assert user_key(data_key(a)) == a
    assert parse_memo_key(data_key(a)) is None
    assert not data_key(a).startswith(("m", "r"))


@given(w1=names, r1=text, s1=st.integers(1, 10**6), w2=names, r2=text, s2=st.integers(1, 10**6))
def test_memo_keys_are_injective(w1: str, r1: str, s1: int, w2: str, r2: str, s2: int) -> None:
    k1, k2 = memo_key(w1, r1, step_tag(s1)), memo_key(w2, r2, step_tag(s2))
    assert (k1 == k2) == ((w1, r1, s1) == (w2, r2, s2))
    assert parse_memo_key(k1) == (w1, r1, step_tag(s1))
    assert memo_key(w1, r1, step_tag(s1)) != memo_key(w1, r1, compensation_tag(s1))
    assert user_key(k1) is None and user_key(run_key(w1)) is None


@given(key=text)
def test_hostile_user_keys_cannot_touch_bookkeeping(key: str) -> None:
    """A body writing any key in the runs table's request partition leaves the run intact."""
    store = MemoryStore()

    def body(tx: Tx) -> str:
        tx.put(key, "overwritten?")
        return "ok"

    @workflow("victim")
    def victim() -> object:
        yield atomic("idemflowruns", "req", body)
        yield atomic("idemflowruns", "req", body)
        return "done"

    assert run(victim(), request_id="req", store=store) == "done"
    assert run(victim(), request_id="req", store=store) == "done"
    rows = {k for _, k, _ in store.scan("idemflowruns")}
    assert data_key(key) in rows
    assert run_key("victim") in rows


@pytest.mark.parametrize("bad", ["", "x" * 256, "\ud800", 1, None])
def test_bad_request_ids(bad: object) -> None:
    with pytest.raises(InvalidNameError):
        check_request_id(bad)


@given(
    w1=names, r1=text, k1=text, o1=st.integers(0, 10**9), w2=names, r2=text, k2=text, o2=st.integers(0, 10**9)
)
def test_event_and_stream_keys_are_injective_and_in_a_space_of_their_own(
    w1: str, r1: str, k1: str, o1: int, w2: str, r2: str, k2: str, o2: int
) -> None:
    """No event, stream value or stream end meets another's key, a memo, a message or a data row;
    a stream's values sort by offset, its end after them."""

    e1, e2 = event_key(w1, r1, k1), event_key(w2, r2, k2)
    s1, s2 = stream_key(w1, r1, k1, o1), stream_key(w2, r2, k2, o2)
    assert (e1 == e2) == ((w1, r1, k1) == (w2, r2, k2))
    assert (s1 == s2) == ((w1, r1, k1, o1) == (w2, r2, k2, o2))
    assert parse_published_key(e1) == (w1, r1, k1, None)
    assert parse_published_key(s1) == (w1, r1, k1, f"{o1:010d}")
    assert parse_published_key(stream_end_key(w1, r1, k1)) == (w1, r1, k1, "end")
    if (w1, r1, k1) == (w2, r2, k2):
        assert (s1 < s2) == (o1 < o2) and s1 < stream_end_key(w1, r1, k1)
    for other in (data_key(k1), memo_key(w1, r1, step_tag(o1 + 1)), run_key(w1), inbox_key(w1, r1, k1, k2)):
        assert other not in (e1, s1) and parse_published_key(other) is None
    assert user_key(e1) is None and parse_memo_key(s1) is None
