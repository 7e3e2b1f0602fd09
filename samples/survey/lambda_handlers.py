"""The survey's AWS Lambda functions, as deploy/aws/template.yaml wires them.

``worker`` finishes submitted responses from the SQS event-source mapping; ``relay`` runs the
outbox relay on an EventBridge schedule; ``respond`` is ``POST /surveys/{survey}/responses``
behind an HTTP API, exactly once per ``Idempotency-Key``. The store and queue URLs come from
the environment (``IDEMFLOW_STORE``, ``IDEMFLOW_QUEUE``; the template sets them), and nothing is
opened until the first invocation, so a cold start imports no SDK it does not use.
"""

from __future__ import annotations

import os
from typing import Any

from idemflow import Idem
from idemflow.aws_lambda import HttpRequest, http_handler, schedule_handler, sqs_handler
from idemflow.errors import InvalidInputError
from samples.survey import workflows
from samples.survey.tables import STATUSES
from samples.survey.workflows import WORKFLOWS

STORE_ENV, QUEUE_ENV = "IDEMFLOW_STORE", "IDEMFLOW_QUEUE"

worker = sqs_handler(WORKFLOWS, store=os.environ[STORE_ENV], queue=os.environ[QUEUE_ENV])
"""Handler ``samples.survey.lambda_handlers.worker``: one SQS batch, partial failures reported."""
relay = schedule_handler(store=os.environ[STORE_ENV], queue=os.environ[QUEUE_ENV])
"""Handler ``samples.survey.lambda_handlers.relay``: one outbox relay pass per scheduled event."""


@http_handler(os.environ[STORE_ENV], refusals=STATUSES)
def respond(request: HttpRequest) -> Idem[Any]:
    """Handler ``samples.survey.lambda_handlers.respond``: record and count one response.

    200 ``{"counted": true, ...}`` (a duplicate gets the same answer); a body of the wrong shape
    is 400 before anything runs; an unknown survey 404, a second response of a respondent 409."""
    try:
        response = workflows.parse_response(request.path_parameters.get("survey", ""), request.body)
    except workflows.Invalid as exc:
        raise InvalidInputError(str(exc)) from None
    return workflows.respond(response)


__all__ = ["QUEUE_ENV", "STORE_ENV", "relay", "respond", "worker"]
