"""Strict JSON: values that would not survive the round trip are refused, naming where."""

from __future__ import annotations

import json
import pickle
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow import errors
from idemflow.serialization import MAX_DEPTH, decode, encode, fingerprint

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text().filter(lambda key: not key.startswith("$$")), children, max_size=4)
    ),
    max_leaves=20,
)


@given(value=json_values)
def test_round_trip_is_exact(value: Any) -> None:
    assert decode(encode(value)) == value


@given(value=json_values)
def test_canonical_form_is_the_standard_librarys(value: Any) -> None:
    """Stored text (and so fingerprints and signatures) must not depend on how we call the encoder."""
    assert encode(value) == json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@given(a=json_values, b=json_values)
def test_fingerprint_equal_iff_canonical_equal_with_numbers_by_value(a: Any, b: Any) -> None:
    """Numbers count by value (``1 == 1.0``), as JSON does; everything else as encoded."""
    assert (fingerprint(a) == fingerprint(b)) == (encode(_whole_as_int(a)) == encode(_whole_as_int(b)))


def _whole_as_int(value: Any) -> Any:
    if type(value) is float and value.is_integer():
        return int(Decimal(repr(value)))
    if type(value) is list:
        return [_whole_as_int(item) for item in value]
    if type(value) is dict:
        return {key: _whole_as_int(item) for key, item in value.items()}
    return value


def test_key_order_does_not_change_fingerprint() -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})


@pytest.mark.parametrize(
    "value, fragment",
    [
        ((1, 2), "tuple"),
        ({1, 2}, "set"),
        ({1: "x"}, "dict key"),
        (float("nan"), "not a JSON number"),
        (float("inf"), "not a JSON number"),
        (b"bytes", "bytes"),
        (object(), "object"),
        ({"deep": [{"x": (1,)}]}, "tuple"),
    ],
)
def test_non_json_is_refused_with_the_place_named(value: object, fragment: str) -> None:
    with pytest.raises(errors.InvalidValueError) as caught:
        encode(value, "value of accounts/alice/balance")
    assert fragment in str(caught.value) and "accounts/alice/balance" in str(caught.value)


def test_too_deep_is_refused() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    with pytest.raises(errors.InvalidValueError):
        encode(value)


def test_cycles_are_refused_as_too_deep() -> None:
    """The encoder keeps no circular-reference markers: the validation walk must stop cycles."""
    cycle: list[Any] = []
    cycle.append(cycle)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    for value in (cycle, loop, {"a": [cycle]}):
        with pytest.raises(errors.InvalidValueError, match="nested deeper"):
            encode(value)


ERRORS = [
    errors.InvalidNameError("table", "", "must not be empty"),
    errors.InvalidValueError("here", "bad"),
    errors.LimitExceededError("here", "too big"),
    errors.IdempotencyKeyReuseError("wf", "r", "a" * 64, "b" * 64),
    errors.NonDeterminismError("wf", "r", 3, "atomic a", "atomic b"),
    errors.ConflictError("wf", "r", 2, "t", "p", 12),
    errors.BackendError("missing table"),
    errors.TransientError("throttled"),
    errors.ConfigurationError("bad url"),
    errors.WorkflowAborted({"why": "x"}, "wf", "r"),
    errors.CompensationError("wf", "r", 2, "undo", "boom"),
    errors.MessageNotDeliveredError("wf", "r", "topic", "request already finished: completed"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_is_an_idemflow_error_and_picklable(error: errors.IdemflowError) -> None:
    assert isinstance(error, errors.IdemflowError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and str(error)
