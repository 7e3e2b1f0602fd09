"""The counter shortcut of the local stores gives exactly the text the full increment path gives."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow.number_model import DIGITS
from idemflow.serialization import decode, encode
from idemflow.stores._op_rules import added, counted
from idemflow.stores.base import RowRef

REF = RowRef("t", "p", "d:n")
BIG = 10**DIGITS
ints = st.integers(min_value=-(BIG * 2), max_value=BIG * 2)
stored = st.one_of(
    ints.map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(encode),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: encode(Decimal(d))),
    st.text(max_size=5).map(encode),
    st.sampled_from(["true", "null", "[]", "{}"]),
)
NOT_JSON = ["-", "", "+5", " 5", "5 ", "\u0663", "1_0", "00", "-01", "0x1", "--1"]


@given(stored, st.one_of(ints, st.floats(allow_nan=False, allow_infinity=False)))
def test_the_shortcut_agrees_with_the_full_path_or_steps_aside(text: str, delta: int | float) -> None:
    quick = counted(text, delta)
    if quick is None:
        return
    assert type(delta) is int
    assert quick == added(REF, decode(text), delta)


@given(st.integers(min_value=-(BIG - 1) // 2, max_value=(BIG - 1) // 2), st.integers(-(10**6), 10**6))
def test_small_int_counters_take_the_shortcut(base: int, delta: int) -> None:
    assert counted(str(base), delta) == str(base + delta)


@pytest.mark.parametrize("text", NOT_JSON)
def test_text_that_is_not_a_json_int_is_left_to_the_full_path(text: str) -> None:
    assert counted(text, 1) is None


def test_a_sum_past_the_exact_range_is_left_to_the_full_path() -> None:
    assert counted(str(BIG - 1), 1) is None
    assert counted("1" + "0" * DIGITS, 0) is None
