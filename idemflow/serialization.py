"""JSON values: strict encoding, canonical form and input fingerprints.

Everything idemflow stores (data, step results, inputs, queue messages) is
JSON, never pickle: it is portable across languages and processes, and a
stored value cannot execute code when read back. Encoding is strict so that a
value that would not survive the round trip (a tuple, a set, a non-string
dict key, NaN) is refused *before* anything is written, with the place named.

>>> encode({"b": 1, "a": [True, None]})
'{"a":[true,null],"b":1}'
>>> fingerprint({"amount": 5}) == fingerprint({"amount": 5})
True
"""

from __future__ import annotations

import hashlib
import json
from typing import Union

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


_dumps = _encoder.encode


def encode(value: object, where: str = "value", *, envelope: int = 0) -> str:
    """Canonical JSON text of ``value``, or :class:`InvalidValueError` naming ``where``.

    ``envelope`` is how many levels of its own the library wrapped around a
    user's value (a memo holds a step result one level down): they do not
    count against :data:`MAX_DEPTH`, so every value accepted as a row is also
    accepted as a step or workflow result.
    """
    problem = _find_problem(value, -envelope)
    if problem is not None:
        raise InvalidValueError(where, problem)
    return _dumps(value)


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
    """Parse stored JSON text."""
    value: JSON = json.loads(text)
    return value


def fingerprint(value: object, where: str = "workflow input", *, envelope: int = 0) -> str:
    """sha256 of the canonical JSON of ``value``: equal inputs, equal fingerprints."""
    return digest(encode(value, where, envelope=envelope))


def digest(text: str) -> str:
    """The fingerprint of a canonical JSON text (hex sha256 of its UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SCALARS = (str, int, float, bool, type(None))


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
    return f"{kind.__name__} {_short(value)} is not JSON (use dict, list, str, int, float, bool, None)"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
