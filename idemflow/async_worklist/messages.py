"""Continuation messages: a small pointer to a submitted request, as JSON.

A message names the workflow, the version the request started on and the
request id; the input and every step value stay in the store (the run
record and the memos), so any input the store accepts can be resumed,
whatever the queue's size limit, and a worker always checks what it replays
against the memos. It is JSON only, never pickle, and parsed strictly.
When a signing key is configured the message carries an HMAC-SHA256 over its
canonical form and a worker with a key refuses unsigned or tampered ones (the
key given, else ``IDEMFLOW_SIGNING_KEY``: :func:`resolve_signing_key`, for
every side that signs or checks). A
forged pointer can at worst resume a request somebody submitted, which the
memos make harmless.

Messages of format 1 (from releases before pointers, still in queues at an
upgrade) are read too: their input is checked against the stored
fingerprint and their carried step values are ignored.

>>> body = encode_pointer(Pointer("survey", 2, "r-1"), b"k")
>>> decode_pointer(body, b"k")
Pointer(workflow='survey', version=2, request_id='r-1', steps=(), legacy_input=None, continuation=None)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow.errors import InvalidValueError, MessageRejectedError, deprecated_error
from idemflow.records import Continuation, OutboxEntry
from idemflow.serialization import JSON, encode

FORMAT_VERSION = 2
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
"""What :func:`_signature` produces: HMAC-SHA256 as 64 lowercase hex digits."""


@dataclass(frozen=True, slots=True)
class Pointer:
    """What a worker needs to find a request: its workflow, version and id."""

    workflow: str
    version: int
    request_id: str
    steps: tuple[tuple[str, str, str], ...] = ()
    """``(table, partition, identity)`` of each step before the checkpoint, as ``submit`` ran them:
    a resume checks them against its code. Absent from pointers a relay sends."""
    legacy_input: dict[str, JSON] | None = None
    """The input a format-1 message carried (checked against the stored fingerprint)."""
    continuation: Continuation | None = None
    """Which continuation of a waiting request this is (see :class:`~idemflow.records.Continuation`):
    absent from wake-ups, relays and operators' pointers, which always run."""


def _payload(pointer: Pointer) -> dict[str, JSON]:
    payload: dict[str, JSON] = {
        "v": FORMAT_VERSION,
        "workflow": pointer.workflow,
        "version": pointer.version,
        "request_id": pointer.request_id,
    }
    if pointer.steps:
        payload["steps"] = [list(step) for step in pointer.steps]
    if pointer.continuation is not None:
        payload["c"] = pointer.continuation.to_json()
    return payload


# A format-1 message carried user values three levels down (input -> args -> value).
_ENVELOPE = 3


def _signature(payload: dict[str, JSON], key: bytes) -> str:
    try:
        text = encode(payload, envelope=_ENVELOPE)
    except InvalidValueError as exc:  # a format-1 input holding a key idemflow now reserves
        raise MessageRejectedError(f"cannot be checked: {exc}") from None
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def encode_pointer(pointer: Pointer, key: bytes | None) -> str:
    """The message body: canonical JSON, signed when ``key`` is given."""
    payload = _payload(pointer)
    if key is not None:
        payload["sig"] = _signature(payload, key)
    return encode(payload, f"continuation of {pointer.workflow!r} request {pointer.request_id!r}")


_FIELDS = {
    2: {"v", "workflow", "version", "request_id"},
    1: {"v", "workflow", "request_id", "input", "recorded"},
}
_OPTIONAL = {2: {"sig", "steps", "c"}, 1: {"sig"}}


def decode_pointer(body: str, key: bytes | None) -> Pointer:
    """Parse and check a message body; :class:`MessageRejectedError` says why not."""
    try:
        raw: Any = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MessageRejectedError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise MessageRejectedError("not a JSON object")
    expected = _FIELDS.get(raw.get("v"))  # type: ignore[arg-type]
    if expected is None:
        raise MessageRejectedError(
            f"format version {raw.get('v')!r}, this worker reads 1 and {FORMAT_VERSION}"
        )
    extra = set(raw) - expected - _OPTIONAL[raw["v"]]
    if extra or not expected <= set(raw):
        raise MessageRejectedError(
            f"unexpected fields {sorted(extra)} or missing {sorted(expected - set(raw))}"
        )
    workflow, request_id = raw["workflow"], raw["request_id"]
    if not isinstance(workflow, str) or not isinstance(request_id, str) or not request_id:
        raise MessageRejectedError("workflow and request_id must be strings")
    version = raw.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise MessageRejectedError("version must be a positive int")
    legacy = _legacy_input(raw) if raw["v"] == 1 else None
    steps = raw.get("steps", [])
    if not isinstance(steps, list) or not all(_is_journal_entry(step) for step in steps):
        raise MessageRejectedError("steps must be a list of [table, partition, identity]")
    continuation = raw.get("c")
    if continuation is not None and not _is_continuation(continuation):
        raise MessageRejectedError("c must be [generation >= 1, nonce]")
    _check_signature(raw, key)
    return Pointer(
        workflow,
        version,
        request_id,
        tuple(tuple(step) for step in steps),
        legacy,
        None if continuation is None else Continuation.from_json(continuation),
    )


def _is_continuation(raw: object) -> bool:
    return (
        isinstance(raw, list)
        and len(raw) == 2
        and type(raw[0]) is int
        and raw[0] >= 1
        and isinstance(raw[1], str)
        and 0 < len(raw[1]) <= 32
    )


def _is_journal_entry(step: object) -> bool:
    return isinstance(step, list) and len(step) == 3 and all(isinstance(part, str) for part in step)


def _legacy_input(raw: dict[str, Any]) -> dict[str, JSON]:
    given = raw["input"]
    if not isinstance(given, dict) or set(given) != {"args", "kwargs"}:
        raise MessageRejectedError("input must be {'args': [...], 'kwargs': {...}}")
    if not isinstance(given["args"], list) or not isinstance(given["kwargs"], dict):
        raise MessageRejectedError("input args must be a list and kwargs an object")
    recorded = raw["recorded"]
    if not isinstance(recorded, list) or not all(_is_step(step) for step in recorded):
        raise MessageRejectedError("recorded must be a list of [tag, identity, value]")
    return given


def _check_signature(raw: dict[str, Any], key: bytes | None) -> None:
    if key is None:
        return
    if "sig" not in raw:
        raise MessageRejectedError("unsigned message, but this worker requires signatures")
    signature = raw.pop("sig")
    # The shape first: hmac.compare_digest takes only ASCII str (anything else raises TypeError).
    if not isinstance(signature, str) or not _SIGNATURE.fullmatch(signature):
        raise MessageRejectedError("signature is not an HMAC-SHA256 in 64 lowercase hex digits")
    if not hmac.compare_digest(signature.encode("ascii"), _signature(raw, key).encode("ascii")):
        raise MessageRejectedError("signature does not match: message tampered with or signed by another key")


def _is_step(step: object) -> bool:
    return (
        isinstance(step, list)
        and len(step) == 3
        and isinstance(step[0], str)
        and step[0][:1] == "s"
        and step[0][1:].isdigit()
        and isinstance(step[1], str)
    )


SIGNING_KEY_ENV = "IDEMFLOW_SIGNING_KEY"
"""Where the signing key is read from when a submitter, worker or host is given none."""


def resolve_signing_key(explicit: bytes | str | None) -> bytes | None:
    """The HMAC key: the one given, else ``IDEMFLOW_SIGNING_KEY``, else None (unsigned)."""
    key = explicit if explicit is not None else os.environ.get(SIGNING_KEY_ENV)
    if key is None or key == "":
        return None
    return key.encode("utf-8") if isinstance(key, str) else key


def announcer(key: bytes | None) -> Callable[[OutboxEntry], str]:
    """How the engine words the continuation of another request it wakes (a child, a receiver)."""
    return lambda entry: encode_pointer(Pointer(entry.workflow, entry.version, entry.request_id), key)


def __getattr__(name: str) -> Any:
    # MessageRejected lived here before 1.0: idemflow.errors.MessageRejectedError now.
    return deprecated_error(__name__, name)
