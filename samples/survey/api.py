"""The survey's HTTP API (Starlette on uvicorn): clients send their own request ids and retry freely.

Every ``POST`` takes the client's request id in an ``Idempotency-Key``
header (required) and runs the workflow under it, so a client that timed
out, lost the connection or saw the server die just sends the same request
again with the same key — it gets the first answer, and the survey counts
the response once. Reusing a key for a different body is refused (422).

==========================================  ==========================================================
``POST /surveys``                           create a survey: 201 ``{"survey": id}``
``GET  /surveys/{id}``                      its definition
``POST /surveys/{id}/responses``            submit a response: 200 ``{"counted": true, ...}``, or with a
                                            queue 202 ``{"status": "running", "status_url": ...}``
``GET  /surveys/{id}/results``              the summary: counts per option
``GET  /responses/{request_id}``            where a submitted response stands (asynchronous variant):
                                            202 while running, 200 once final
``GET  /healthz``                           200 when the server is up
==========================================  ==========================================================

Errors are JSON ``{"error": code, "detail": message}``: 400 (no key, not
JSON, bad key), 404 (no such survey), 409 (survey exists, already
responded), 422 (key reused for another request, invalid survey or answers),
503 (store busy or unavailable: retry with the same key).

The request handling is a class, :class:`SurveyService`, whose ``async``
methods answer Starlette responses; the app is a thin layer of routes over
it, so the load generator can call the same code without HTTP
(:class:`~samples._api.Direct`). It runs on the event loop throughout:
:mod:`idemflow.asgi` runs the workflows (``arun``, ``asubmit``) and answers
the errors, the reads are awaited, and the store is an asynchronous one
opened in the app's lifespan. The plumbing the samples share is
:mod:`samples._api`.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idemflow.asgi import error
from samples._api import Service, application, get_, post
from samples.survey import workflows
from samples.survey.tables import STATUSES
from samples.survey.workflows import Invalid


class SurveyService(Service):
    """What the API does, as ``async`` calls answering responses (usable without HTTP).

    With a ``queue``, responses are submitted asynchronously: the client is
    answered at the workflow's checkpoint (after the response is recorded)
    and ``idemflow worker samples.survey.workflows:WORKFLOWS`` counts it.

    >>> from idemflow.stores import MemoryStore
    >>> from samples._api import Direct
    >>> service = SurveyService(MemoryStore())
    >>> lunch = {"id": "s", "title": "T", "questions": [{"id": "q", "text": "?", "options": ["a", "b"]}]}
    >>> with Direct(service) as call:
    ...     call(service.create_survey, "k1", lunch)
    ...     call(service.respond, "k2", "s", {"respondent": "ada", "answers": {"q": "c"}}).status
    Answer(status=201, body={'survey': 's'})
    422
    """

    statuses = STATUSES
    invalid = Invalid
    status_url = "/responses/{request_id}"

    async def create_survey(self, key: str, body: object) -> Response:
        created = await self.run(workflows.create_survey(workflows.parse_survey(body)), key)
        return JSONResponse(created, 201)

    async def respond(self, key: str, survey_id: str, body: object) -> Response:
        m = workflows.respond(workflows.parse_response(survey_id, body))
        if self.queue is None:
            return JSONResponse(await self.run(m, key))
        return await self.submit(m, key, done=200)

    async def response_status(self, request_id: str) -> Response:
        return await self.idem.status("respond", request_id)

    async def survey(self, survey_id: str) -> Response:
        found = await workflows.asurvey(self.store, survey_id)
        return JSONResponse(found) if found else error(404, "not_found", f"no survey {survey_id!r}")

    async def results(self, survey_id: str) -> Response:
        found = await workflows.aresults(self.store, survey_id)
        return JSONResponse(found) if found else error(404, "not_found", f"no survey {survey_id!r}")


def create_app(service: SurveyService) -> Starlette:
    """The ASGI application over ``service`` (see the module docstring for the routes)."""
    return application(
        service,
        [
            Route(
                "/surveys",
                post(service, lambda key, _p, body: service.create_survey(key, body)),
                methods=["POST"],
            ),
            Route("/surveys/{survey}", get_(lambda p, _q: service.survey(p["survey"]))),
            Route(
                "/surveys/{survey}/responses",
                post(service, lambda key, p, body: service.respond(key, p["survey"], body)),
                methods=["POST"],
            ),
            Route("/surveys/{survey}/results", get_(lambda p, _q: service.results(p["survey"]))),
            Route("/responses/{request_id}", get_(lambda p, _q: service.response_status(p["request_id"]))),
        ],
    )


__all__ = ["STATUSES", "SurveyService", "create_app"]
