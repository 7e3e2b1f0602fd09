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
    memo_key,
    parse_memo_key,
    run_key,
    step_tag,
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
