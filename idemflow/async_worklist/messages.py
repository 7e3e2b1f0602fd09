"""Continuation messages: the rest of a workflow, as JSON a worker can trust.

A message names a registered workflow and carries its input and the values
of the steps already done (with each step's identity), so a worker resumes
without reading those steps back from the store. It is JSON only, never
pickle, and parsed strictly: anything malformed is refused before it can
reach a workflow. When a signing key is configured the message carries an
HMAC-SHA256 over its canonical form; a worker with a key refuses unsigned or
tampered messages, and trusts carried step values only from signed ones.

>>> body = encode_continuation(Continuation("survey", "r-1", [1], {}, ()), b"k")
>>> decode_continuation(body, b"k").workflow
'survey'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from idemflow.errors import InvalidInputError
from idemflow.serialization import JSON, encode

FORMAT_VERSION = 1
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
"""What :func:`_signature` produces: HMAC-SHA256 as 64 lowercase hex digits."""


class MessageRejected(InvalidInputError):
    """A queue message that must not be executed (malformed, tampered, unknown, forged)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """A step done before the checkpoint: its memo tag, identity and value."""

    tag: str
    identity: str
    value: JSON


@dataclass(frozen=True, slots=True)
class Continuation:
    """What a worker needs to finish a request."""

    workflow: str
    request_id: str
    args: list[JSON]
    kwargs: dict[str, JSON]
    recorded: tuple[RecordedStep, ...]
    signed: bool = False


def _payload(continuation: Continuation) -> dict[str, JSON]:
    return {
        "v": FORMAT_VERSION,
        "workflow": continuation.workflow,
        "request_id": continuation.request_id,
        "input": {"args": continuation.args, "kwargs": continuation.kwargs},
        "recorded": [[step.tag, step.identity, step.value] for step in continuation.recorded],
    }


# Every user value in a payload (an argument, a recorded step value) sits three levels down.
_ENVELOPE = 3


def _signature(payload: dict[str, JSON], key: bytes) -> str:
    return hmac.new(key, encode(payload, envelope=_ENVELOPE).encode("utf-8"), hashlib.sha256).hexdigest()


def encode_continuation(continuation: Continuation, key: bytes | None) -> str:
    """The message body: canonical JSON, signed when ``key`` is given."""
    payload = _payload(continuation)
    if key is not None:
        payload["sig"] = _signature(payload, key)
    where = f"continuation of {continuation.workflow!r} request {continuation.request_id!r}"
    return encode(payload, where, envelope=_ENVELOPE)


def decode_continuation(body: str, key: bytes | None) -> Continuation:
    """Parse and check a message body; :class:`MessageRejected` says why not."""
    try:
        raw: Any = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MessageRejected(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise MessageRejected("not a JSON object")
    expected = {"v", "workflow", "request_id", "input", "recorded"}
    extra = set(raw) - expected - {"sig"}
    if extra or not expected <= set(raw):
        raise MessageRejected(f"unexpected fields {sorted(extra)} or missing {sorted(expected - set(raw))}")
    if raw["v"] != FORMAT_VERSION:
        raise MessageRejected(f"format version {raw['v']!r}, this worker reads {FORMAT_VERSION}")
    workflow, request_id, given_input = raw["workflow"], raw["request_id"], raw["input"]
    if not isinstance(workflow, str) or not isinstance(request_id, str) or not request_id:
        raise MessageRejected("workflow and request_id must be strings")
    if not isinstance(given_input, dict) or set(given_input) != {"args", "kwargs"}:
        raise MessageRejected("input must be {'args': [...], 'kwargs': {...}}")
    if not isinstance(given_input["args"], list) or not isinstance(given_input["kwargs"], dict):
        raise MessageRejected("input args must be a list and kwargs an object")
    recorded = raw["recorded"]
    if not isinstance(recorded, list) or not all(_is_step(step) for step in recorded):
        raise MessageRejected("recorded must be a list of [tag, identity, value]")
    signed = "sig" in raw
    if key is not None:
        if not signed:
            raise MessageRejected("unsigned message, but this worker requires signatures")
        signature = raw.pop("sig")
        # The shape first: hmac.compare_digest takes only ASCII str (anything else raises TypeError).
        if not isinstance(signature, str) or not _SIGNATURE.fullmatch(signature):
            raise MessageRejected("signature is not an HMAC-SHA256 in 64 lowercase hex digits")
        if not hmac.compare_digest(signature.encode("ascii"), _signature(raw, key).encode("ascii")):
            raise MessageRejected("signature does not match: message tampered with or signed by another key")
    steps = tuple(RecordedStep(step[0], step[1], step[2]) for step in recorded)
    args, kwargs = given_input["args"], given_input["kwargs"]
    return Continuation(workflow, request_id, args, kwargs, steps, signed=signed and key is not None)


def _is_step(step: object) -> bool:
    return (
        isinstance(step, list)
        and len(step) == 3
        and isinstance(step[0], str)
        and step[0][:1] == "s"
        and step[0][1:].isdigit()
        and isinstance(step[1], str)
    )
