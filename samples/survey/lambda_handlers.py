"""The survey's AWS Lambda functions, as deploy/aws/template.yaml wires them.

``worker`` finishes submitted responses from the SQS event-source mapping; ``relay`` runs the
outbox relay on an EventBridge schedule. The store and queue URLs come from the environment
(``IDEMFLOW_STORE``, ``IDEMFLOW_QUEUE``; the template sets them), and nothing is opened until
the first invocation, so a cold start imports no SDK it does not use.
"""

from __future__ import annotations

import os

from idemflow.aws_lambda import schedule_handler, sqs_handler
from samples.survey.workflows import WORKFLOWS

STORE_ENV, QUEUE_ENV = "IDEMFLOW_STORE", "IDEMFLOW_QUEUE"

worker = sqs_handler(WORKFLOWS, store=os.environ[STORE_ENV], queue=os.environ[QUEUE_ENV])
"""Handler ``samples.survey.lambda_handlers.worker``: one SQS batch, partial failures reported."""
relay = schedule_handler(store=os.environ[STORE_ENV], queue=os.environ[QUEUE_ENV])
"""Handler ``samples.survey.lambda_handlers.relay``: one outbox relay pass per scheduled event."""

__all__ = ["QUEUE_ENV", "STORE_ENV", "relay", "worker"]
