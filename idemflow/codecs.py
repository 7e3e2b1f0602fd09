"""Values beyond JSON: ``Decimal``, dates and times, ``UUID``, enums, dataclasses and pydantic models.

A workflow's inputs, step results and rows are stored as JSON text. The types
users hand us most often that JSON lacks (every DynamoDB number boto3 returns
is a ``Decimal``; requests carry timestamps, ids and models) are stored as a
one-key object whose key is reserved, ``{"$$decimal": "10.50"}``, and come
back as the same type, equal to what was written. A stored value never
imports or runs code when it is read back: a class (dataclass, pydantic
model, enum) is found only among modules this process has already imported,
and a tag whose class is not there stays a plain dict (with a warning), so
operators' tools that lack the application's modules still read every row.

Dict keys that start with ``$$`` are reserved for these tags and refused in
values, so a user's dict can never be read back as something else.

Other types get a codec with :func:`register_codec`:

>>> import fractions
>>> register_codec(fractions.Fraction, "fraction", str, fractions.Fraction)
>>> from idemflow.serialization import decode, encode
>>> encode({"share": fractions.Fraction(1, 3)})
'{"share":{"$$fraction":"1/3"}}'
>>> decode(encode(fractions.Fraction(1, 3)))
Fraction(1, 3)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import logging
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from idemflow.errors import InvalidInputError

TAG = "$$"
"""The prefix of a tagged value's one key; refused at the start of any other dict key."""

log = logging.getLogger("idemflow.codecs")


@dataclass(frozen=True, slots=True)
class Codec:
    """How one type is stored: a JSON-able form (which may hold other codec values) and back."""

    kind: type[Any]
    name: str
    to_json: Callable[[Any], Any]
    from_json: Callable[[Any], Any]


_BY_TYPE: dict[type[Any], Codec] = {}
_BY_TAG: dict[str, Codec] = {}


def register_codec(
    kind: type[Any], name: str, to_json: Callable[[Any], Any], from_json: Callable[[Any], Any]
) -> None:
    """Store instances of exactly ``kind`` as ``{"$$<name>": to_json(value)}``.

    ``from_json(to_json(v)) == v`` must hold, and every process whose
    workflows read such values (workers too) must register the same codec;
    elsewhere the value reads as its tagged dict. Registering a name twice
    with another type is an error.
    """
    if not name or not name.replace("_", "").isalnum():
        raise InvalidInputError(f"codec name {name!r}: use letters, digits and underscores")
    held = _BY_TAG.get(TAG + name)
    if held is not None and held.kind is not kind:
        raise InvalidInputError(f"codec name {name!r} is already registered for {held.kind.__qualname__}")
    codec = Codec(kind, name, to_json, from_json)
    _BY_TYPE[kind] = codec
    _BY_TAG[TAG + name] = codec


def _decimal_text(value: Decimal) -> str:
    if not value.is_finite():  # NaN != NaN: it could not come back equal
        raise ValueError("is not a finite number")
    return str(value)


def _builtin() -> None:
    register_codec(Decimal, "decimal", _decimal_text, Decimal)
    register_codec(dt.datetime, "datetime", dt.datetime.isoformat, dt.datetime.fromisoformat)
    register_codec(dt.date, "date", dt.date.isoformat, dt.date.fromisoformat)
    register_codec(dt.time, "time", dt.time.isoformat, dt.time.fromisoformat)
    register_codec(uuid.UUID, "uuid", str, uuid.UUID)


_builtin()

_CLASS_TAGS = (TAG + "dataclass", TAG + "pydantic", TAG + "enum")


def tagged(value: object) -> dict[str, Any] | None:
    """The tagged form of ``value`` (one level: what it holds is converted by the caller), or
    None for a type no codec handles. A class must be importable by its name to come back."""
    kind = type(value)
    codec = _BY_TYPE.get(kind)
    if codec is not None:
        return {TAG + codec.name: codec.to_json(value)}
    if isinstance(value, enum.Enum):
        return {TAG + "enum": [class_name(kind), value.value]}
    fields = model_fields(value)
    if fields is None:
        return None
    tag = "dataclass" if dataclasses.is_dataclass(value) else "pydantic"
    return {TAG + tag: [class_name(kind), fields]}


def model_fields(value: object) -> dict[str, Any] | None:
    """The fields of a dataclass instance or a pydantic model as they are stored (a dataclass's
    values as they are, a model's as ``model_dump(mode="json")``: pydantic converts its own field
    types, and ``model_validate`` parses them back); None for any other value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if _is_pydantic_model(type(value)):
        dumped: dict[str, Any] = value.model_dump(mode="json")  # type: ignore[attr-defined]
        return dumped
    return None


def class_name(kind: type[Any]) -> str:
    """``module:qualname``, refusing a class that could not be found again by that name."""
    name = f"{kind.__module__}:{kind.__qualname__}"
    if "<locals>" in kind.__qualname__:
        raise ValueError(f"is of class {name}, defined inside a function: define it at module level")
    return name


def _is_pydantic_model(kind: type[Any]) -> bool:
    """Duck-typed (pydantic v2), so pydantic is not a dependency."""
    return callable(getattr(kind, "model_dump", None)) and callable(getattr(kind, "model_validate", None))


def revive(obj: dict[str, Any]) -> Any:
    """``json.loads``'s ``object_hook``: a tagged object becomes its value again."""
    if len(obj) != 1:
        return obj
    ((tag, held),) = obj.items()
    codec = _BY_TAG.get(tag)
    if codec is not None:
        return codec.from_json(held)
    if tag in _CLASS_TAGS and type(held) is list and len(held) == 2 and type(held[0]) is str:
        kind = _loaded_class(held[0])
        if kind is None:
            return obj
        if tag == TAG + "enum" and issubclass(kind, enum.Enum):
            return kind(held[1])
        if tag == TAG + "dataclass" and dataclasses.is_dataclass(kind) and type(held[1]) is dict:
            return _dataclass(kind, held[1])
        if tag == TAG + "pydantic" and _is_pydantic_model(kind):
            return kind.model_validate(held[1])
        _warn_once(held[0], "is not a class of that kind")
        return obj
    if tag.startswith(TAG):
        _warn_once(tag, "has no codec registered in this process")
    return obj


def _dataclass(kind: type[Any], fields: dict[str, Any]) -> Any:
    """Build without running ``__init__`` twice over: init fields through it, the rest set after."""
    declared = {field.name: field for field in dataclasses.fields(kind)}
    given = {name: value for name, value in fields.items() if name in declared and declared[name].init}
    made = kind(**given)
    for name, value in fields.items():
        if name in declared and not declared[name].init:
            object.__setattr__(made, name, value)
    return made


def _loaded_class(name: str) -> type[Any] | None:
    """The class named ``module:qualname`` if its module is imported already (never imports)."""
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split(".") if found is not None else ():
        found = getattr(found, part, None)
    if isinstance(found, type):
        return found
    _warn_once(name, "is not loaded in this process (import its module first); it is read as a dict")
    return None


_warned: set[str] = set()


def _warn_once(name: str, problem: str) -> None:
    if name not in _warned:
        _warned.add(name)
        log.warning("stored value %s %s", name, problem)
