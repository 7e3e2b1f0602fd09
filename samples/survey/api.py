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
:class:`~samples._api.Answer` values; the Starlette app is a thin layer over
it, so the load generator can call the same code directly against a store.
The plumbing both samples share (answers, error mapping, endpoints, the
asynchronous answer at the checkpoint, ``serve``) is :mod:`samples._api`.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.applications import Starlette
from starlette.routing import Route

from idemflow import run
from samples._api import Answer, Service, error, get_, healthz, post
from samples.survey import workflows
from samples.survey.workflows import Invalid

STATUSES = {"not_found": 404, "invalid": 422, "exists": 409, "already_responded": 409}
"""HTTP status of each refusal code of :mod:`samples.survey.workflows`."""


class SurveyService(Service):
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

    statuses = STATUSES
    invalid = Invalid

    def create_survey(self, key: str | None, body: object) -> Answer:
        def action(key: str) -> Answer:
            created = run(
                workflows.create_survey(workflows.parse_survey(body)),
                request_id=key,
                store=self.store,
                clock=self.clock,
            )
            return Answer(201, dict(created))

        return self.guarded(key, action)

    def respond(self, key: str | None, survey_id: str, body: object) -> Answer:
        def action(key: str) -> Answer:
            m = workflows.respond(workflows.parse_response(survey_id, body))
            if self.queue is None:
                counted = run(m, request_id=key, store=self.store, clock=self.clock)
                return Answer(200, {**counted})
            return self.submitted(m, key, "/responses/" + quote(key, safe=""), done=200)

        return self.guarded(key, action)

    def response_status(self, request_id: str) -> Answer:
        return self.request_status("respond", request_id)

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


__all__ = ["STATUSES", "SurveyService", "create_app"]
