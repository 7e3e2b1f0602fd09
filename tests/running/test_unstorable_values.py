"""Values no codec can store (a lone surrogate, an int past the digit limit) are refused as
:class:`~idemflow.errors.InvalidInputError` before anything is written, wherever they sit.

They pass the type walk of :mod:`idemflow.serialization` (a str is a str), so without a check of
their text they escaped from a backend or a digest as a bare ``UnicodeEncodeError`` or
``ValueError``: an HTTP 500 instead of a 400, after the run had begun.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Generator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemflow import InvalidInputError, InvalidValueError, Tx, atomic, run, workflow
from idemflow.client import submit
from idemflow.serialization import encode, fingerprint
from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.stores.base import RowRef
from idemflow.worker import MemoryQueue

ANY_TEXT = st.text(alphabet=st.characters(codec=None), max_size=6)
"""Any code point, lone surrogates included (hypothesis leaves those out by default)."""

HUGE_INTS = st.builds(
    lambda sign, digits: sign * 10**digits, st.sampled_from([1, -1]), st.integers(4290, 5000)
)
"""Around the int-to-str digit limit (4300 by default): built, as hypothesis cannot show such a constant."""

nested = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | HUGE_INTS
    | st.floats()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.just(Decimal("1E+5000"))
    | ANY_TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(ANY_TEXT, children, max_size=3),
    max_leaves=12,
)


def keep(value: Any) -> Any:
    def keep_body(tx: Tx) -> Any:
        tx.put("value", value)
        return value

    return keep_body


@workflow("keep")
def keep_flow(given_input: dict[str, Any]) -> Generator[Any, Any, Any]:
    """Puts the value (a row value) and returns it (a step result, then the workflow's result)."""
    kept = yield atomic("items", given_input["name"], keep(given_input["value"]))
    return kept


def _rows(store: Store) -> list[tuple[str, str, str]]:
    return [(table, partition, key) for table in store.tables() for partition, key, _ in store.scan(table)]


def _same(a: Any, b: Any) -> bool:
    """Equal as stored: NaN never reaches a store, and ``-0.0 == 0.0`` as JSON has it."""
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float and type(b) is float:
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and bool(a == b)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("how", ["run", "submit"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=ANY_TEXT, value=nested)
def test_any_input_is_kept_exactly_or_refused_as_invalid_input_with_nothing_written(
    kind: str, how: str, tmp_path: Path, name: str, value: Any
) -> None:
    store: Store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / f"{uuid.uuid4().hex}.db")
    queue = MemoryQueue()
    request = keep_flow({"name": name, "value": value})
    try:
        if how == "run":
            result = run(request, request_id="r-1", store=store)
        else:
            outcome = submit(request, request_id="r-1", store=store, queue=queue).outcome
            assert outcome is not None
            result = outcome.result
    except InvalidInputError:
        assert _rows(store) == [] and queue.receive() == []
        return
    finally:
        store.close()
    assert _same(result, value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("\ud800", "text '\\ud800' holds a lone surrogate"),
        ({"ok": ["fine", "a\udfffb"]}, "lone surrogate ('\\udfff' at 1)"),
        ({"\udc00": 1}, "dict key '\\udc00' holds a lone surrogate"),
        ([1, 2, 10**5000], "an int of about 5001 digits"),
        ({"big": -(10**4400)}, "past Python's limit of"),
    ],
    ids=["surrogate", "nested", "key", "int", "negative"],
)
def test_the_value_and_its_place_are_named(value: object, fragment: str) -> None:
    for check in (encode, fingerprint):
        with pytest.raises(InvalidValueError) as caught:
            check(value, "value of items/p/k")
        assert fragment in str(caught.value) and "items/p/k" in str(caught.value)


def test_a_step_result_or_row_value_made_in_the_step_is_refused_before_its_commit() -> None:
    """Clean input, bad values built inside the steps: the step's commit is refused, not attempted."""

    def made(kind: str) -> Any:
        def made_body(tx: Tx) -> Any:
            if kind == "row":
                tx.put("k", {"x": chr(0xD800)})
                return None
            return [1, 10**5000]

        return made_body

    @workflow("make")
    def make(kind: str) -> Generator[Any, Any, Any]:
        made_value = yield atomic("items", "p", made(kind))
        return made_value

    for kind, fragment in (("row", "value of items/p/k"), ("result", "result of step 1")):
        store = MemoryStore()
        with pytest.raises(InvalidValueError, match=fragment):
            run(make(kind), request_id=f"r-{kind}", store=store)
        assert _rows(store) == [] and store.read(RowRef("items", "p", "dk")) is None


def test_a_decimal_past_the_int_digit_limit_has_a_fingerprint_by_value() -> None:
    """An integral decimal too long for an int's text stays a tagged decimal in the canonical
    form; its exponent is checked first, so 1E+999999999 builds no billion-digit int."""
    assert fingerprint(Decimal("1E+5000")) == fingerprint(Decimal("10E+4999"))
    assert fingerprint(Decimal("1E+999999999")) != fingerprint(Decimal("1E+5000"))
    assert fingerprint(Decimal("1E+20")) == fingerprint(10**20)


def test_a_topic_with_a_lone_surrogate_is_refused_before_anything_is_written() -> None:
    """A topic is part of message row keys and of memo identities, stored as UTF-8."""
    from idemflow import receive, send
    from idemflow.client import send_message

    store = MemoryStore()
    with pytest.raises(InvalidValueError, match="topic"):
        send_message(store, "mailbox", "box-1", "news\ud800", "hello", key="k-1")
    with pytest.raises(InvalidValueError, match="topic"):
        run(receive("news\udc00", timeout=1), request_id="r-1", store=store)
    with pytest.raises(InvalidValueError, match="topic"):
        send("mailbox", "box-1", "\udfff", "hello")
    assert _rows(store) == []
