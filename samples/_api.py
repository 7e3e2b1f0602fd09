"""The HTTP plumbing the samples' APIs share (Starlette on uvicorn).

Each sample's API is a plain service class whose methods return
:class:`Answer` values (usable without HTTP: the load generators call them
directly against a store), and a thin Starlette app over it built from
:func:`post` and :func:`get_`. What is common lives here:

- :class:`Answer` and :func:`error`, the answers as data;
- :class:`Service`: what a sample's service holds (store, queue, signing key, clock);
- :func:`guarded`: runs a request under the client's ``Idempotency-Key`` and
  turns what may be raised into the documented HTTP errors (400 no or bad
  key, 409 key reused or refused, 422 invalid, 503 store busy);
- :func:`answer_at_checkpoint`: the asynchronous variant, ``submit`` and
  answer ``202`` once the workflow reached its checkpoint (or its final
  answer, if it finished or was refused before);
- :func:`run_status_answer`: ``GET`` where a submitted request stands;
- :func:`post`, :func:`get_`, :func:`healthz` and :func:`serve`.

>>> from idemflow import MemoryStore, WorkflowAborted
>>> def refuse(key):
...     raise WorkflowAborted({"code": "too_low", "message": "bid 5 does not beat 7"}, "bid", key)
>>> by_code = lambda aborted: refused(aborted, {"too_low": 409})
>>> guarded("k1", refuse, by_code, ValueError)
Answer(status=409, body={'error': 'too_low', 'detail': 'bid 5 does not beat 7'})
>>> guarded(None, refuse, by_code, ValueError).body["error"]
'missing_idempotency_key'
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from idemflow import (
    ConflictError,
    Idem,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    RunStatus,
    Store,
    TransientStoreError,
    WorkflowAborted,
)
from idemflow.async_worklist import Queue, status, submit

KEY_HEADER = "Idempotency-Key"


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as data: what the API sends and what the load generator compares."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def error(status: int, code: str, detail: str) -> Answer:
    return Answer(status, {"error": code, "detail": detail})


MISSING_KEY = error(400, "missing_idempotency_key", f"send your request id in the {KEY_HEADER} header")


def refused(aborted: WorkflowAborted, statuses: Mapping[str, int]) -> Answer:
    """The answer for a workflow that refused the request: its reason's code decides the status."""
    reason = aborted.reason
    if isinstance(reason, dict) and isinstance(reason.get("code"), str):
        return error(statuses.get(reason["code"], 409), reason["code"], str(reason.get("message", "")))
    return error(409, "aborted", str(reason))


def guarded(
    key: str | None,
    action: Callable[[str], Answer],
    refuse: Callable[[WorkflowAborted], Answer],
    invalid: type[Exception],
) -> Answer:
    """Run ``action(key)`` and turn what it may raise into the documented HTTP errors.

    ``refuse`` answers a workflow's refusal (an abort, however the sample words
    its reasons); ``invalid`` is the sample's exception for a body of the wrong
    shape (422).
    """
    if not key:
        return MISSING_KEY
    try:
        return action(key)
    except invalid as exc:
        return error(422, "invalid", str(exc))
    except WorkflowAborted as aborted:
        return refuse(aborted)
    except IdempotencyKeyReuseError as exc:
        return error(409, "idempotency_key_reused", str(exc))
    except InvalidInputError as exc:  # e.g. an empty or 300-character key
        return error(400, "invalid_input", str(exc))
    except (ConflictError, TransientStoreError) as exc:
        return error(503, "busy", f"{exc}; retry with the same {KEY_HEADER}")


class Service:
    """The base of the samples' services: the ``store``; a ``queue`` for the asynchronous
    variant (submitted requests are answered at their checkpoint, workers finish them) and the
    ``signing_key`` of its messages; the ``clock`` the workflows run by. A sample sets its
    refusal codes' HTTP ``statuses`` (or overrides :meth:`refuse`, if its abort reasons are
    not ``{"code", "message"}``) and its ``invalid`` exception (a body of the wrong shape)."""

    statuses: ClassVar[Mapping[str, int]] = {}
    invalid: ClassVar[type[Exception]] = ValueError

    def __init__(
        self,
        store: Store,
        queue: Queue | None = None,
        *,
        signing_key: bytes | str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.queue = queue
        self.signing_key = signing_key
        self.clock = clock

    def guarded(self, key: str | None, action: Callable[[str], Answer]) -> Answer:
        """:func:`guarded` with the sample's refusals and invalid-body exception."""
        return guarded(key, action, self.refuse, self.invalid)

    def refuse(self, aborted: WorkflowAborted) -> Answer:
        """The answer to a refusal: by the reason's code, through :attr:`statuses`."""
        return refused(aborted, self.statuses)

    def submitted(
        self, m: Idem[Any], key: str, status_url: str, *, done: int, accepted: Mapping[str, Any] | None = None
    ) -> Answer:
        """:func:`answer_at_checkpoint` on this service's store and queue."""
        if self.queue is None:
            raise ValueError("submitted() needs a service with a queue")
        return answer_at_checkpoint(
            m,
            key,
            store=self.store,
            queue=self.queue,
            signing_key=self.signing_key,
            status_url=status_url,
            done=done,
            accepted=accepted,
        )

    def request_status(self, workflow: str, request_id: str) -> Answer:
        """:func:`run_status_answer` on this service's store."""
        return run_status_answer(self.store, workflow, request_id)


def answer_at_checkpoint(
    m: Idem[Any],
    key: str,
    *,
    store: Store,
    queue: Queue,
    signing_key: bytes | str | None,
    status_url: str,
    done: int = 200,
    accepted: Mapping[str, Any] | None = None,
) -> Answer:
    """The asynchronous variant: ``submit`` ``m``, answer once it reached its checkpoint.

    ``202 {"request_id", "status": "running", "status_url", **accepted}`` while
    workers finish it; ``done`` with the result if it already finished (a
    duplicate of a finished request); a refusal before the checkpoint raises
    :class:`~idemflow.WorkflowAborted`, for :func:`guarded` to answer.
    """
    pending = submit(m, request_id=key, store=store, queue=queue, signing_key=signing_key)
    now = pending.outcome  # final when submit saw the request finish, else None: workers have it
    if now is not None and now.status is RunStatus.ABORTED:
        raise WorkflowAborted(now.reason, pending.workflow, key)
    if now is not None and now.status is RunStatus.COMPLETED:
        return Answer(done, dict(now.result) if isinstance(now.result, dict) else {})
    return Answer(202, {"request_id": key, "status": "running", "status_url": status_url, **(accepted or {})})


def run_status_answer(store: Store, workflow: str, request_id: str) -> Answer:
    """``GET`` the status of a request: 404 if no such request was ever submitted."""
    try:
        found = status(store, workflow, request_id)
    except InvalidInputError as exc:
        return error(400, "invalid_input", str(exc))
    if found.status is RunStatus.UNKNOWN:
        return error(404, "not_found", f"no request {request_id!r} was submitted")
    body: dict[str, Any] = {"request_id": request_id, "status": found.status.value}
    if found.status is RunStatus.COMPLETED:
        body["result"] = found.result
    elif found.status is RunStatus.ABORTED:
        body["reason"] = found.reason
    return Answer(200, body)


# -- Starlette plumbing -------------------------------------------------------------------

Endpoint = Callable[[Request], Awaitable[Response]]


def respond_with(answer: Answer) -> Response:
    headers = {"Retry-After": "1"} if answer.status == 503 else None
    return JSONResponse(answer.body, answer.status, headers=headers)


def post(call: Callable[[str | None, Mapping[str, str], object], Answer]) -> Endpoint:
    """An endpoint taking a JSON body: ``call(idempotency key, path params, body)`` in a worker thread.

    The workflow runs on a thread of the pool (store calls block), so the
    event loop keeps accepting requests meanwhile.
    """

    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return respond_with(error(400, "invalid_json", "the request body is not JSON"))
        key = request.headers.get(KEY_HEADER)
        return respond_with(await run_in_threadpool(call, key, dict(request.path_params), body))

    return endpoint


def get_(call: Callable[[Mapping[str, str], Mapping[str, str]], Answer]) -> Endpoint:
    """A read endpoint: ``call(path params, query params)`` in a worker thread."""

    def guarded_read(path: Mapping[str, str], query: Mapping[str, str]) -> Answer:
        try:
            return call(path, query)
        except InvalidInputError as exc:  # an id the store cannot hold (empty, too long)
            return error(400, "invalid_input", str(exc))
        except IdemflowError as exc:
            return error(503, "busy", str(exc))

    async def endpoint(request: Request) -> Response:
        answer = await run_in_threadpool(guarded_read, dict(request.path_params), dict(request.query_params))
        return respond_with(answer)

    return endpoint


async def healthz(_request: Request) -> Response:
    return JSONResponse({"ok": True})


def serve(app: Starlette, host: str, port: int) -> None:
    """Run ``app`` on uvicorn until interrupted (access log off: the load generator is chatty)."""
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


__all__ = [
    "KEY_HEADER",
    "MISSING_KEY",
    "Answer",
    "Endpoint",
    "Service",
    "answer_at_checkpoint",
    "error",
    "get_",
    "guarded",
    "healthz",
    "post",
    "refused",
    "respond_with",
    "run_status_answer",
    "serve",
]
