"""The row format's own helpers: a memo's text built from its parts is the full encoding's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemflow.errors import InvalidValueError
from idemflow.records import RunRecord, RunStatus, child_outcome, memo_row, memo_text
from idemflow.serialization import encode

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from([2**53, -(2**53), 2**53 - 1, float("nan"), "\ud800", {"$$x": 1}])
    | st.just(5000).map(lambda digits: 10**digits),  # past the int-to-str limit (unprintable as given)
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


def _full(identity: str, value: Any, aborted: bool, at: int | None, run: str | None) -> str:
    return encode(memo_row(identity, value, aborted=aborted, at=at, run=run), "", envelope=1)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    identity=st.text(max_size=12) | st.sampled_from(["atomic debit", 'effect "q"', "now", "\ud800"]),
    value=values,
    aborted=st.booleans(),
    at=st.none() | st.integers(min_value=0, max_value=2**45),
    run=st.none() | st.sampled_from(["a1b2c3d4e5f6", "x y", "é"]),
)
def test_a_memos_text_is_the_full_encodings_and_so_is_its_refusal(
    identity: str, value: Any, aborted: bool, at: int | None, run: str | None
) -> None:
    try:
        expected = _full(identity, value, aborted, at, run)
    except InvalidValueError as refused:
        with pytest.raises(InvalidValueError) as also:
            memo_text(identity, value, aborted=aborted, at=at, run=run)
        assert (also.value.where, also.value.problem) == (refused.where, refused.problem)
        return
    assert memo_text(identity, value, aborted=aborted, at=at, run=run) == expected


def test_a_cancelled_record_keeps_its_reason_and_an_older_one_has_it_in_its_note() -> None:
    record = RunRecord("fp", RunStatus.CANCELLED, reason="fraud review", waiting="cancelled: fraud review")
    stored = record.to_json()
    assert stored["reason"] == "fraud review" and RunRecord.from_json(stored) == record
    assert child_outcome(record) == {"status": "cancelled", "reason": "fraud review"}
    older = RunRecord.from_json({"fp": "fp", "status": "cancelled", "wait": "cancelled: checking"})
    assert (older.reason, older.cancel_reason) == (None, "checking")
    assert "reason" not in RunRecord("fp", RunStatus.RUNNING, reason="stale").to_json()  # only where meant
