"""Values beyond JSON: canonical, round-tripping, stable fingerprints, refused before any write."""

from __future__ import annotations

import dataclasses
import datetime as dt
import fractions
import logging
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow import InvalidInputError, InvalidValueError, atomic, idempotent_function, register_codec, run
from idemflow.serialization import decode, encode, fingerprint
from idemflow.stores import MemoryStore
from tests.support.codec_types import Line, Order, Receipt, Tier, an_order

decimals = st.decimals(allow_nan=False, allow_infinity=False)
offsets = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))
)
datetimes = st.datetimes(timezones=st.none() | st.just(dt.UTC) | offsets)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | decimals
    | datetimes
    | st.dates()
    | st.times()
    | st.uuids()
    | st.sampled_from(Tier)
)
lines = st.builds(Line, sku=st.text(), price=decimals, quantity=st.integers())
keys = st.text().filter(lambda key: not key.startswith("$$"))
values = st.recursive(
    scalars | lines,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)


@given(value=values)
def test_every_codec_value_comes_back_equal_and_of_its_type(value: Any) -> None:
    back = decode(encode(value))
    assert back == value or (value != value)
    assert _types(back) == _types(value)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    if isinstance(value, Line):
        return (Line, _types(dataclasses.asdict(value)))
    return type(value)


@given(value=values)
def test_encoding_is_canonical(value: Any) -> None:
    """Stored text, and so fingerprints and signatures, depend on the value only."""
    assert encode(decode(encode(value))) == encode(value)
    assert fingerprint(decode(encode(value))) == fingerprint(value)


@given(number=st.integers(min_value=-(2**53), max_value=2**53))  # floats hold these exactly
def test_numbers_fingerprint_by_value(number: int) -> None:
    spellings = [number, float(number), Decimal(number), Decimal(number).quantize(Decimal("0.01"))]
    assert len({fingerprint({"price": spelled}) for spelled in spellings}) == 1


@given(number=st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_and_its_decimal_text_are_one_input(number: float) -> None:
    assert fingerprint([number]) == fingerprint([Decimal(repr(number))])


@given(a=values, b=values)
def test_different_values_have_different_fingerprints(a: Any, b: Any) -> None:
    if fingerprint(a) == fingerprint(b):
        assert encode(_by_value(a)) == encode(_by_value(b))


def _by_value(value: Any) -> Any:
    """What a fingerprint compares: numbers as exact decimals, everything else as stored."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, Decimal)):
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return str(exact.normalize()) if exact else "0"
    if isinstance(value, dict):
        return {key: _by_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_by_value(item) for item in value]
    return decode(encode(value)) if isinstance(value, str) else encode(value)


def test_a_zoned_datetime_comes_back_as_the_same_instant_at_its_offset() -> None:
    """The zone's name is not stored (ISO 8601 has none): the instant and the offset are."""
    from zoneinfo import ZoneInfo

    zoned = dt.datetime(2026, 11, 23, 9, 30, tzinfo=ZoneInfo("Europe/Paris"))
    back = decode(encode(zoned))
    assert back == zoned and back.utcoffset() == dt.timedelta(hours=1)
    assert fingerprint(back) == fingerprint(zoned)


def test_tagged_form_is_readable() -> None:
    assert encode(Decimal("10.50")) == '{"$$decimal":"10.50"}'
    assert encode(uuid.UUID(int=1)) == '{"$$uuid":"00000000-0000-0000-0000-000000000001"}'
    assert encode(Tier.GOLD) == '{"$$enum":["tests.support.codec_types:Tier","gold"]}'
    assert encode(Line("tea", Decimal(1))) == (
        '{"$$dataclass":["tests.support.codec_types:Line",{"price":{"$$decimal":"1"},"quantity":1,"sku":"tea"}]}'
    )


def test_plain_json_text_is_unchanged() -> None:
    """0.1.0 rows and fingerprints stay valid: codecs add nothing to plain JSON."""
    assert encode({"b": [1, 2.5], "a": "$$ in a string"}) == '{"a":"$$ in a string","b":[1,2.5]}'


def test_pydantic_models_and_dataclasses_nest() -> None:
    order = an_order()
    receipt = Receipt(order=order.id, charged=order.total, at=order.placed, notes=["x"])
    back = decode(encode({"order": order, "receipt": receipt}))
    assert back == {"order": order, "receipt": receipt}
    assert type(back["order"].lines[1]) is Line and type(back["receipt"]) is Receipt
    assert back["order"].total == Decimal("6.25")  # a field set after __init__ keeps its value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"$$decimal": "1"}, "reserves"),
        ([{"ok": {"$$x": 1}}], "reserves"),
        (Decimal("NaN"), "finite"),
        ({"a": Decimal("Infinity")}, "finite"),
        (fractions.Fraction(1, 7) + 0j, "complex"),
        ({"when": dt.timedelta(1)}, "timedelta"),
    ],
)
def test_values_no_codec_can_hold_are_refused(value: Any, fragment: str) -> None:
    with pytest.raises(InvalidValueError, match=fragment):
        encode(value)


def test_a_class_defined_in_a_function_is_refused_before_any_write() -> None:
    @dataclasses.dataclass
    class Local:
        n: int

    store = MemoryStore()
    with pytest.raises(InvalidValueError, match="module level"):
        run(atomic("items", "p", lambda tx: tx.put("k", Local(1))), request_id="r", store=store)
    assert list(store.scan("items")) == []


def test_a_class_not_loaded_here_reads_as_its_tagged_dict(caplog: pytest.LogCaptureFixture) -> None:
    """An operator's CLI without the application's modules still reads every row (never imports)."""
    text = '{"$$dataclass":["not_imported_anywhere.models:Order",{"id":1}]}'
    with caplog.at_level(logging.WARNING, logger="idemflow.codecs"):
        assert decode(text) == {"$$dataclass": ["not_imported_anywhere.models:Order", {"id": 1}]}
    assert "not_imported_anywhere.models:Order" in caplog.text


def test_an_unknown_tag_reads_as_its_dict() -> None:
    assert decode('{"$$money":"5 EUR"}') == {"$$money": "5 EUR"}


class Money:
    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (other.cents, other.currency) == (self.cents, self.currency)

    def __hash__(self) -> int:
        return hash((self.cents, self.currency))


def test_a_registered_codec_round_trips_through_a_workflow() -> None:
    register_codec(Money, "money", lambda m: [m.cents, m.currency], lambda held: Money(*held))
    store = MemoryStore()
    price = Money(1050, "EUR")
    step = atomic("items", "p", lambda tx: (tx.put("price", price), tx.get("price"))[1])
    assert run(step, request_id="m", store=store) == price
    again = run(atomic("items", "p", lambda tx: tx.get("price")), request_id="n", store=store)
    assert again == price and type(again) is Money
    with pytest.raises(InvalidInputError):
        register_codec(Order, "money", str, str)  # the name is taken by another type


def test_an_idempotent_function_takes_and_returns_models() -> None:
    store, calls = MemoryStore(), []

    @idempotent_function(store, key="order.id")
    def pay(order: Order) -> Receipt:
        calls.append(order.id)
        return Receipt(order=order.id, charged=order.total, at=order.placed)

    order = an_order(9)
    first, second = pay(order), pay(order=order)
    assert first == second and type(second) is Receipt and second.charged == Decimal("6.25")
    assert calls == [order.id]
