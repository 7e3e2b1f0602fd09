"""The survey's HTTP API (Starlette on uvicorn): clients send their own request ids and retry freely.

Every ``POST`` takes the client's request id in an ``Idempotency-Key``
header (required) and runs the workflow under it, so a client that timed
out, lost the connection or saw the server die just sends the same request
again with the same key — it gets the first answer, and the survey counts
the response once. Reusing a key for a different body is refused (409).

==========================================  ==========================================================
``POST /surveys``                           create a survey: 201 ``{"survey": id}``
``GET  /surveys/{id}``                      its definition
``POST /surveys/{id}/responses``            submit a response: 200 ``{"counted": true, ...}``, or with a
                                            queue 202 ``{"status": "running", "status_url": ...}``
``GET  /surveys/{id}/results``              the summary: counts per option
``GET  /responses/{request_id}``            where a submitted response stands (asynchronous variant)
``GET  /healthz``                           200 when the server is up
==========================================  ==========================================================

Errors are JSON ``{"error": code, "detail": message}``: 400 (no key, not
JSON, bad key), 404 (no such survey), 409 (key reused, survey exists,
already responded), 422 (invalid survey or answers), 503 (store busy or
unavailable: retry with the same key).

The request handling is a plain class, :class:`SurveyService`, returning
:class:`Answer` values; the Starlette app is a thin layer over it, so the
load generator can call the same code directly against a store. The generic
parts (``Answer``, error mapping, endpoint plumbing, ``serve``) are reused by
the auction sample.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idemflow import (
    ConflictError,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    RunStatus,
    Store,
    TransientStoreError,
    WorkflowAborted,
    run,
)
from idemflow.async_worklist import Queue, status, submit
from samples.survey import workflows
from samples.survey.workflows import Invalid

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
    statuses: Mapping[str, int],
    invalid: type[Exception] = Invalid,
) -> Answer:
    """Run ``action(key)`` and turn what it may raise into the documented HTTP errors.

    ``invalid`` is the sample's exception for a body of the wrong shape (422).
    """
    if not key:
        return MISSING_KEY
    try:
        return action(key)
    except invalid as exc:
        return error(422, "invalid", str(exc))
    except WorkflowAborted as aborted:
        return refused(aborted, statuses)
    except IdempotencyKeyReuseError as exc:
        return error(409, "idempotency_key_reused", str(exc))
    except InvalidInputError as exc:  # e.g. an empty or 300-character key
        return error(400, "invalid_input", str(exc))
    except (ConflictError, TransientStoreError) as exc:
        return error(503, "busy", f"{exc}; retry with the same {KEY_HEADER}")


def run_status_answer(store: Store, workflow: str, request_id: str) -> Answer:
    """``GET`` the status of a request: 404 if no such request was ever submitted."""
    try:
        found = status(store, workflow, request_id)
    except InvalidInputError as exc:
        return error(400, "invalid_input", str(exc))
    if found.status is RunStatus.PENDING:
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


# -- the survey service ---------------------------------------------------------------------

STATUSES = {"not_found": 404, "invalid": 422, "exists": 409, "already_responded": 409}
"""HTTP status of each refusal code of :mod:`samples.survey.workflows`."""


class SurveyService:
    """What the API does, as plain calls returning :class:`Answer` (usable without HTTP).

    With a ``queue``, responses are submitted asynchronously: the client is
    answered at the workflow's checkpoint (after the response is recorded)
    and ``idemflow worker samples.survey.workflows:WORKFLOWS`` counts it.

    >>> from idemflow import MemoryStore
    >>> service = SurveyService(MemoryStore())
    >>> service.create_survey("k1", {"id": "s", "title": "T", "questions": [
    ...     {"id": "q", "text": "?", "options": ["a", "b"]}]})
    Answer(status=201, body={'survey': 's'})
    >>> service.respond("k2", "s", {"respondent": "ada", "answers": {"q": "c"}}).status
    422
    """

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

    def create_survey(self, key: str | None, body: object) -> Answer:
        def action(key: str) -> Answer:
            created = run(
                workflows.create_survey(workflows.parse_survey(body)),
                request_id=key,
                store=self.store,
                clock=self.clock,
            )
            return Answer(201, dict(created))

        return guarded(key, action, STATUSES)

    def respond(self, key: str | None, survey_id: str, body: object) -> Answer:
        def action(key: str) -> Answer:
            m = workflows.respond(workflows.parse_response(survey_id, body))
            if self.queue is None:
                counted = run(m, request_id=key, store=self.store, clock=self.clock)
                return Answer(200, {**counted})
            submit(m, request_id=key, store=self.store, queue=self.queue, signing_key=self.signing_key)
            # A request refused before its checkpoint records that as a cache write, which the cloud
            # stores send from a background thread: wait for it, or the status could still say running.
            self.store.flush()
            now = status(self.store, "respond", key)
            if now.status is RunStatus.ABORTED:
                raise WorkflowAborted(now.reason, "respond", key)
            if now.status is RunStatus.COMPLETED:
                return Answer(200, dict(now.result) if isinstance(now.result, dict) else {})
            where = "/responses/" + quote(key, safe="")
            return Answer(202, {"request_id": key, "status": "running", "status_url": where})

        return guarded(key, action, STATUSES)

    def response_status(self, request_id: str) -> Answer:
        return run_status_answer(self.store, "respond", request_id)

    def survey(self, survey_id: str) -> Answer:
        found = workflows.survey(self.store, survey_id)
        return Answer(200, {**found}) if found else error(404, "not_found", f"no survey {survey_id!r}")

    def results(self, survey_id: str) -> Answer:
        found = workflows.results(self.store, survey_id)
        return Answer(200, found) if found else error(404, "not_found", f"no survey {survey_id!r}")


def create_app(service: SurveyService) -> Starlette:
    """The ASGI application over ``service`` (see the module docstring for the routes)."""
    routes = [
        Route("/healthz", healthz),
        Route("/surveys", post(lambda key, _p, body: service.create_survey(key, body)), methods=["POST"]),
        Route("/surveys/{survey}", get_(lambda p, _q: service.survey(p["survey"]))),
        Route(
            "/surveys/{survey}/responses",
            post(lambda key, p, body: service.respond(key, p["survey"], body)),
            methods=["POST"],
        ),
        Route("/surveys/{survey}/results", get_(lambda p, _q: service.results(p["survey"]))),
        Route("/responses/{request_id}", get_(lambda p, _q: service.response_status(p["request_id"]))),
    ]
    return Starlette(routes=routes)


__all__ = [
    "KEY_HEADER",
    "STATUSES",
    "Answer",
    "SurveyService",
    "create_app",
    "error",
    "get_",
    "guarded",
    "healthz",
    "post",
    "refused",
    "run_status_answer",
    "serve",
]
