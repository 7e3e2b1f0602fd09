"""What an HTTP answer says for each of the library's errors, without a web framework.

:mod:`idemflow.asgi` answers Starlette responses and :mod:`idemflow.aws_lambda`'s HTTP handlers
answer API Gateway proxy responses; both take the status, code and detail from here, so a
client gets the same answer from either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from idemflow.errors import (
    ConflictError,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    LimitReachedError,
    MissingIdempotencyKeyError,
    RequestFailedError,
    TransientError,
    VersionNotHeldError,
    WorkflowAborted,
)

KEY_HEADER = "Idempotency-Key"


class Refusal(NamedTuple):
    """An error answer: ``status`` with ``{"error": code, "detail": detail}`` and ``headers``."""

    status: int
    code: str
    detail: str
    headers: Mapping[str, str] | None = None

    def body(self) -> dict[str, str]:
        """The JSON body. A detail may quote what the client sent, a lone surrogate included
        (JSON can escape one), which no UTF-8 body can carry: it is escaped (``\\udc00``)."""
        detail = self.detail
        shown = detail if detail.isascii() else detail.encode("utf-8", "backslashreplace").decode("utf-8")
        return {"error": self.code, "detail": shown}


def refusal(exc: IdemflowError, refusals: Mapping[str, int] | None = None) -> Refusal | None:
    """The answer for one of the library's errors, or None for one that is the server's fault.

    ``refusals`` maps an abort reason's ``"code"`` (``tx.abort({"code": "sold_out", ...})``)
    to its status; other aborts answer 409.

    >>> refusal(IdempotencyKeyReuseError("order", "k-1", "f1", "f2"))[:2]
    (422, 'idempotency_key_reused')
    """
    match exc:
        case MissingIdempotencyKeyError():
            return Refusal(400, "missing_idempotency_key", str(exc))
        case InvalidInputError():
            return Refusal(400, "invalid_input", str(exc))
        case IdempotencyKeyReuseError():
            return Refusal(422, "idempotency_key_reused", str(exc))
        case WorkflowAborted(reason=reason):
            if isinstance(reason, dict) and isinstance(reason.get("code"), str):
                code = reason["code"]
                return Refusal((refusals or {}).get(code, 409), code, str(reason.get("message", "")))
            return Refusal(409, "aborted", str(reason))
        case RequestFailedError():
            return Refusal(500, "failed", str(exc))
        case LimitReachedError(retry_after=after):
            wait = {"Retry-After": str(max(1, math.ceil(after)))}
            return Refusal(429, "limit_reached", f"{exc}; retry with the same {KEY_HEADER}", wait)
        case ConflictError() | TransientError() | VersionNotHeldError():
            return Refusal(503, "busy", f"{exc}; retry with the same {KEY_HEADER}", {"Retry-After": "1"})
    return None
