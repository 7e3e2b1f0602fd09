"""How an idemflow row becomes an Azure Table entity, and back.

Kept apart from :mod:`idemflow.stores.azure_tables` (which talks to the
service) because it is pure: escaping, chunking and size arithmetic can be
tested without a server, and they hold the backend's limits in one place.

Keys: Azure refuses ``/ \\ # ?`` and control characters in ``PartitionKey``
and ``RowKey``; the service double-decodes ``%`` in entity URLs (a known
Azure bug), and Azurite's batch parser breaks on U+2028/U+2029 in a URL.
Each of those characters, and the escape character ``~`` itself, becomes
``~`` plus four upper-case hex digits. Every other character stays, so the
mapping is a prefix code: injective, and undone by :func:`unescape_key`.

>>> escape_key("a/b~c")
'a~002Fb~007Ec'
>>> unescape_key(escape_key("50% of #1?"))
'50% of #1?'

Values: the UTF-8 bytes of the canonical JSON text are split over binary
properties ``v0``, ``v1``, … of at most :data:`CHUNK_BYTES` each (Azure caps a
property at 64 KiB), with ``vn`` the number of chunks. Why binary and not
string properties: the SDK sends JSON with every non-ASCII character (and
DEL) as a six-byte ``\\uXXXX`` escape, and Azurite refuses a request body over
1 MiB, so a string value's size on the wire depends on its characters (up to
6x); base64 is always 4/3, and Azure also stores bytes at half the size of
UTF-16 text. A tombstone (``tomb`` = true, no value) stands for an absent row.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import quote

from idemflow.errors import LimitExceededError

MAX_KEY_BYTES = 1024
"""Azure's key limit: 1 KiB of UTF-16 (512 code units) after escaping."""
MAX_ENTITY_BYTES = 1024 * 1024
"""Azure's entity limit (not enforced by Azurite), by Azure's size formula."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
"""Azure's limit on the body of one entity group transaction."""
MAX_BATCH_OPS = 100
"""Operations in one entity group transaction."""
CHUNK_BYTES = 64_000
"""Bytes per binary property: under both 64 KB and 64 KiB (the service and the docs differ)."""

TOMB = "tomb"
EXPIRES_AT = "expires_at"
COUNT = "vn"

_FORBIDDEN = re.compile("[~/\\\\#?%\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPED = re.compile("~([0-9A-F]{4})")
_OP_OVERHEAD = 1024
"""Bytes of multipart framing and headers per operation in a batch body (generous)."""


def escape_key(text: str) -> str:
    """``text`` with every character Azure (or Azurite) mishandles in a key replaced by ``~XXXX``."""
    return _FORBIDDEN.sub(lambda m: f"~{ord(m.group()):04X}", text)


def unescape_key(text: str) -> str:
    """Inverse of :func:`escape_key`."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


def utf16_units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (characters beyond U+FFFF count twice).

    >>> utf16_units("a🙂")
    3
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def check_key(where: str, what: str, escaped: str) -> None:
    """Refuse an escaped key over Azure's 1 KiB before anything is sent."""
    size = 2 * utf16_units(escaped)
    if size > MAX_KEY_BYTES:
        raise LimitExceededError(
            where, f"{what} is {size} bytes as UTF-16 after escaping; Azure Tables allows {MAX_KEY_BYTES}"
        )


def chunks(data: bytes) -> list[bytes]:
    """``data`` cut into pieces of at most :data:`CHUNK_BYTES` (at least one piece).

    >>> [len(piece) for piece in chunks(b"x" * 130_000)]
    [64000, 64000, 2000]
    """
    return [data[start : start + CHUNK_BYTES] for start in range(0, len(data), CHUNK_BYTES)] or [b""]


def value_entity(partition: str, key: str, text: str, expires_at: float | None) -> dict[str, Any]:
    """The entity holding ``text`` (escaped keys given)."""
    pieces = chunks(text.encode("utf-8"))
    entity: dict[str, Any] = {"PartitionKey": partition, "RowKey": key, COUNT: len(pieces)}
    for index, piece in enumerate(pieces):
        entity[f"v{index}"] = piece
    if expires_at is not None:
        entity[EXPIRES_AT] = float(expires_at)
    return entity


def tombstone_entity(partition: str, key: str, now: float) -> dict[str, Any]:
    """An entity that reads as absent; ``expires_at`` = now lets gc remove it at any time."""
    return {"PartitionKey": partition, "RowKey": key, TOMB: True, EXPIRES_AT: float(now)}


def key_entity(partition: str, key: str) -> dict[str, Any]:
    """An entity naming a row only (for delete, and for the MERGE that checks an ETag)."""
    return {"PartitionKey": partition, "RowKey": key}


def entity_text(entity: Any) -> str | None:
    """The JSON text an entity holds, or None for a tombstone."""
    if entity.get(TOMB):
        return None
    count = entity.get(COUNT)
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"entity has no valid {COUNT!r} property: not written by idemflow")
    return b"".join(entity[f"v{index}"] for index in range(count)).decode("utf-8")


def _property_bytes(value: object) -> int:
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return 4 if -(2**31) <= value < 2**31 else 8
    if isinstance(value, float):
        return 8
    if isinstance(value, str):
        return 4 + 2 * utf16_units(value)
    if isinstance(value, bytes):
        return 4 + len(value)
    raise TypeError(f"unexpected property type {type(value).__name__}")


def entity_bytes(entity: dict[str, Any]) -> int:
    """Size by Azure's published formula: 4 bytes, keys as UTF-16, then per property
    8 bytes + its name as UTF-16 + its value; plus the Timestamp Azure adds."""
    size = 4 + 2 * (utf16_units(entity["PartitionKey"]) + utf16_units(entity["RowKey"]))
    size += 8 + 2 * len("Timestamp") + 8
    for name, value in entity.items():
        if name not in ("PartitionKey", "RowKey"):
            size += 8 + 2 * utf16_units(name) + _property_bytes(value)
    return size


def wire_bytes(entity: dict[str, Any]) -> int:
    """Size of the entity's JSON as the SDK sends it: non-ASCII as ``\\uXXXX``,
    bytes as base64 with an ``Edm.Binary`` annotation (Azurite caps it at 1 MiB)."""
    wire: dict[str, Any] = {}
    for name, value in entity.items():
        if isinstance(value, bytes):
            wire[name] = base64.b64encode(value).decode("ascii")
            wire[name + "@odata.type"] = "Edm.Binary"
        elif isinstance(value, float):
            wire[name] = value
            wire[name + "@odata.type"] = "Edm.Double"
        else:
            wire[name] = value
    return len(json.dumps(wire))


def request_bytes(entity: dict[str, Any]) -> int:
    """Upper estimate of one operation's share of a batch body: the entity,
    its URL and the multipart framing."""
    url = len(quote(entity["PartitionKey"], safe="")) + len(quote(entity["RowKey"], safe=""))
    return wire_bytes(entity) + 3 * url + _OP_OVERHEAD


def check_entity(where: str, entity: dict[str, Any]) -> None:
    """Refuse an entity over 1 MiB before anything is sent: as Azure stores it
    (Azure's limit) and as it travels (Azurite's)."""
    size = max(entity_bytes(entity), wire_bytes(entity))
    if size > MAX_ENTITY_BYTES:
        raise LimitExceededError(
            where, f"row is {size} bytes as an Azure entity; Azure Tables allows {MAX_ENTITY_BYTES}"
        )
