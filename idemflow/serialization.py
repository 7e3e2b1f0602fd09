"""JSON values: strict encoding, canonical form and input fingerprints.

Everything idemflow stores (data, step results, inputs, queue messages) is
JSON, never pickle: it is portable across languages and processes, and a
stored value cannot execute code when read back. Encoding is strict so that a
value that would not survive the round trip (a tuple, a set, a non-string
dict key, NaN) is refused *before* anything is written, with the place named.
``Decimal``, dates, ``UUID``, enums, dataclasses and pydantic models are
stored as tagged objects and come back as themselves (:mod:`idemflow.codecs`);
plain JSON pays nothing for that.

Fingerprints compare numbers by value, as JSON does: ``10``, ``10.0`` and
``Decimal("10.00")`` are one input.

>>> encode({"b": 1, "a": [True, None]})
'{"a":[true,null],"b":1}'
>>> fingerprint({"amount": 5}) == fingerprint({"amount": 5.0})
True
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any, Union

from idemflow import codecs
from idemflow.errors import InvalidValueError

JSON = Union[  # noqa: UP007 - a recursive alias needs the string forward references
    None, bool, int, float, str, list["JSON"], dict[str, "JSON"]
]
"""A JSON-compatible value as Python holds it after ``json.loads``."""

MAX_DEPTH = 64
"""Deepest nesting accepted; deeper values are refused (stack safety on decode)."""

_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"), check_circular=False
)
"""No circular-reference markers: a value is walked by :func:`_find_problem` first, and a cycle is
refused there as too deep."""


_make_c_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_chunks: Callable[[object, int], Sequence[str]] = (
    _make_c_encoder(
        None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
    if _make_c_encoder is not None
    else lambda value, _level: (_encoder.encode(value),)  # no C accelerator (not CPython)
)
"""The C encoder ``_encoder.encode`` builds anew on every call (``JSONEncoder.iterencode``), built
once: the same settings in the same order, so the same text and the same errors, without two Python
frames and an encoder object per value (a request encodes several)."""


def _dumps(value: object) -> str:
    """``_encoder.encode(value)``, by the encoder built once."""
    return "".join(_chunks(value, 0))


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner ``json.loads`` reaches through two Python frames and two whitespace matches."""
_SPELLED = re.compile(r'\d\.0(?![0-9])|\de\+|"\$\$decimal"')
"""Where a number may be spelled other than by value: a whole float (``10.0``, ``1e+16``) or a
tagged decimal. A match in a string only costs the walk that finds nothing to change."""
_MARK = '"' + codecs.TAG
"""How a tag (or a reserved key) starts in JSON text: absent from almost every text, found at C speed."""


def encode(value: object, where: str = "value", *, envelope: int = 0) -> str:
    """Canonical JSON text of ``value``, or :class:`InvalidValueError` naming ``where``.

    ``envelope`` is how many levels of its own the library wrapped around a
    user's value (a memo holds a step result one level down): they do not
    count against :data:`MAX_DEPTH`, so every value accepted as a row is also
    accepted as a step or workflow result.
    """
    return _text(value, where, envelope)[1]


def encode_canonical(value: object, where: str = "value", *, envelope: int = 0) -> tuple[str, str]:
    """The stored text of ``value`` and the text its fingerprint is taken of (numbers by value).

    They are one string (the same object) unless ``value`` holds a whole float or a ``Decimal``.
    """
    form, text = _text(value, where, envelope)
    if _SPELLED.search(text) is None:  # no whole float, no decimal: the text is canonical already
        return text, text
    normal = _by_value(form)
    return text, (text if normal is form else _dumped(normal, where))


def _text(value: object, where: str, envelope: int) -> tuple[Any, str]:
    """The JSON form of ``value`` and its text. The form is ``value`` itself when it is plain
    JSON (the fast path: one walk, no copy), else a copy with codec types tagged."""
    problem = _find_problem(value, -envelope)
    if problem is _FOREIGN:
        form = _tagged(value, -envelope, where)
        return form, _dumped(form, where)
    if problem is not None:
        raise InvalidValueError(where, problem)
    try:  # the hot path: _dumped inlined
        text = "".join(_chunks(value, 0))
    except ValueError:  # an int past the digit limit
        raise InvalidValueError(where, _unstorable(value) or "cannot be written as JSON text") from None
    if not text.isascii():
        _dumped(value, where)
    if _MARK in text and _reserved_key(value):
        raise InvalidValueError(where, f"a dict key starts with {codecs.TAG!r}: {_RESERVED}")
    return value, text


def _dumped(form: Any, where: str) -> str:
    """The JSON text of ``form``, which every backend can write as UTF-8, or :class:`InvalidValueError`.

    Two values pass the walk of :func:`_find_problem` (which looks at types, not contents) but not
    the trip to bytes: a str holding a lone surrogate, which no UTF-8 text can carry, and an int
    past Python's int-to-str digit limit. Both would otherwise escape from a backend or a digest,
    after the run began, as a bare ``UnicodeEncodeError`` or ``ValueError``. Found here, they are
    refused before anything is written. The check is nearly free: an ASCII text (the usual case)
    is known to be one without a scan, and any other is encoded once, at C speed.
    """
    try:
        text = _dumps(form)
        if not text.isascii():
            text.encode("utf-8")
    except ValueError:  # a UnicodeEncodeError is one too
        raise InvalidValueError(where, _unstorable(form) or "cannot be written as JSON text") from None
    return text


def _unstorable(form: Any) -> str:
    """What in ``form`` has no JSON text as UTF-8 (only called once encoding failed: no hot path)."""
    kind = type(form)
    if kind is str:
        return _unencodable_text("text", form)
    if kind is int:
        try:
            str(form)  # refused at once, before any conversion, when past the limit
        except ValueError:
            digits = int(form.bit_length() * 0.30103) + 1  # log10(2): the limit forbids str(form)
            return (
                f"an int of about {digits} digits is past Python's limit of "
                f"{sys.get_int_max_str_digits()} for writing ints as text (sys.get_int_max_str_digits())"
            )
    if kind is list:
        for item in form:
            problem = _unstorable(item)
            if problem:
                return problem
    if kind is dict:
        for key, item in form.items():
            problem = _unencodable_text("dict key", key) if type(key) is str else ""
            problem = problem or _unstorable(item)
            if problem:
                return problem
    return ""


def _unencodable_text(what: str, text: str) -> str:
    """Why ``text`` cannot be written as UTF-8 (a lone surrogate), or ``""``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"{what} {_short(text)} holds a lone surrogate ({text[exc.start]!r} at {exc.start}), "
            "which is not valid unicode"
        )
    return ""


def sorted_keys(value: JSON) -> JSON:
    """``value`` with every dict's keys in sorted order, as :func:`decode` gives it back.

    >>> list(sorted_keys({"b": 1, "a": [{"d": 0, "c": 0}]}))
    ['a', 'b']
    """
    if type(value) is dict:
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if type(value) is list:
        return [sorted_keys(item) for item in value]
    return value


def decode(text: str) -> JSON:
    """Parse stored JSON text; tagged values come back as what was stored (:mod:`idemflow.codecs`)."""
    if _MARK in text:
        tagged: JSON = json.loads(text, object_hook=codecs.revive)
        return tagged
    try:  # what we write: one value, no white space around it, read by the scanner alone
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # anything else, and its error, as json.loads reads it
        value = json.loads(text)
    return value  # type: ignore[no-any-return]


def fingerprint(value: object, where: str = "workflow input", *, envelope: int = 0) -> str:
    """sha256 of the canonical JSON of ``value``: equal inputs, equal fingerprints.

    Numbers count by value (``10 == 10.0 == Decimal("10.0")``), as two JSON
    texts of one request may spell them differently.
    """
    return digest(encode_canonical(value, where, envelope=envelope)[1])


def digest(text: str) -> str:
    """The fingerprint of a canonical JSON text (hex sha256 of its UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SCALARS = (str, int, float, bool, type(None))
_RESERVED = "idemflow reserves it for tagged values (idemflow.codecs)"
_FOREIGN = "a type JSON lacks"
"""What :func:`_find_problem` says of a value that holds a non-JSON type: a codec may take it."""


def _find_problem(value: object, depth: int) -> str | None:
    """Why ``value`` is not exact JSON, or None. Exact types only: a tuple or a
    str subclass would come back as something else after a round trip."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or value is None:
        return None
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return f"{value!r} is not a JSON number"
        return None
    if depth >= MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if kind is list:
        assert isinstance(value, list)
        for item in value:
            if type(item) not in _SCALARS or type(item) is float:
                problem = _find_problem(item, depth + 1)
                if problem is not None:
                    return problem
        return None
    if kind is dict:
        assert isinstance(value, dict)
        for key, item in value.items():
            if type(key) is not str:
                return f"dict key {key!r} is not a string"
            if type(item) not in _SCALARS or type(item) is float:
                problem = _find_problem(item, depth + 1)
                if problem is not None:
                    return problem
        return None
    return _FOREIGN


def _tagged(value: object, depth: int, where: str) -> Any:
    """A copy of ``value`` with every codec type tagged; anything else is refused, naming it."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or value is None:
        return value
    if kind is float:
        problem = _find_problem(value, depth)
        if problem is not None:
            raise InvalidValueError(where, problem)
        return value
    if depth >= MAX_DEPTH:
        raise InvalidValueError(where, f"nested deeper than {MAX_DEPTH} levels")
    if kind is list:
        assert isinstance(value, list)
        return [_tagged(item, depth + 1, where) for item in value]
    if kind is dict:
        assert isinstance(value, dict)
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidValueError(where, f"dict key {key!r} is not a string")
            if key.startswith(codecs.TAG):
                raise InvalidValueError(
                    where, f"dict key {key!r} starts with {codecs.TAG!r}, which idemflow reserves"
                )
            copy[key] = _tagged(item, depth + 1, where)
        return copy
    try:
        form = codecs.tagged(value)
    except ValueError as exc:  # a class that could not be found again, a NaN Decimal
        raise InvalidValueError(where, f"{kind.__name__} {_short(value)} {exc}") from None
    if form is None:
        problem = "is not JSON (use dict, list, str, int, float, bool, None, or a type with a codec)"
        raise InvalidValueError(where, f"{kind.__name__} {_short(value)} {problem}")
    ((tag, held),) = form.items()
    return {tag: _tagged(held, depth + 1, where)}


def _reserved_key(value: object) -> bool:
    if type(value) is dict:
        assert isinstance(value, dict)
        return any(key.startswith(codecs.TAG) or _reserved_key(item) for key, item in value.items())
    if type(value) is list:
        assert isinstance(value, list)
        return any(_reserved_key(item) for item in value)
    return False


def _by_value(form: Any) -> Any:
    """``form`` (plain or tagged JSON) with numbers spelled one way per value: whole floats and
    integral decimals as ints, decimals a float holds exactly as that float. ``form`` itself when
    nothing changes, so most inputs are not copied."""
    kind = type(form)
    if kind is float:
        return int(Decimal(repr(form))) if form.is_integer() else form
    if kind is list:
        items = [_by_value(item) for item in form]
        return form if all(new is old for new, old in zip(items, form, strict=True)) else items
    if kind is dict:
        if len(form) == 1 and codecs.TAG + "decimal" in form:
            return _decimal_by_value(Decimal(form[codecs.TAG + "decimal"]))
        pairs = {key: _by_value(item) for key, item in form.items()}
        return form if all(pairs[key] is item for key, item in form.items()) else pairs
    return form


def _decimal_by_value(number: Decimal) -> Any:
    if number == number.to_integral_value() and _fits_int_text(number):
        return int(number)
    near = float(number)
    if Decimal(repr(near)) == number:
        return near
    # normalize() rounds to its context, and traps an exponent past the context's range (1E+999999999)
    exact = Context(prec=max(1, len(number.as_tuple().digits)), Emax=MAX_EMAX, Emin=MIN_EMIN)
    return {codecs.TAG + "decimal": str(number.normalize(exact))}


def _fits_int_text(number: Decimal) -> bool:
    """Whether the integral ``number`` as an int can be written as text. One that cannot (``1E+5000``)
    keeps its tagged form, which is canonical as well: no int or float of that value is storable.
    Checked on the exponent, so ``Decimal("1E+999999999")`` never builds its billion-digit int
    (unless the limit is off: ``sys.set_int_max_str_digits(0)``)."""
    limit = sys.get_int_max_str_digits()
    return limit == 0 or number.adjusted() < limit


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
