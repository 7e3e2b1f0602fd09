"""The idemflow survey sample on Azure Functions (Python v2 programming model).

Two functions finish the responses the sample's API submits (``python -m samples.survey serve``
with the same store and queue): ``survey_worker``, triggered by the continuation queue, and
``survey_relay``, the outbox relay every minute. Everything comes from app settings:

- ``AZURE_STORAGE_CONNECTION_STRING``: the storage account of the tables and the queue; the
  queue trigger reads the queue with it too (``connection=``), so the host and idemflow cannot
  point at different accounts;
- ``IDEMFLOW_STORE`` (``azure:?prefix=survey``) and ``IDEMFLOW_QUEUE``
  (``azure-queue:survey-continuations``), which take that connection string when they carry none;
- ``IDEMFLOW_SIGNING_KEY``: the key the API signs continuations with.

host.json beside this file sets the queue trigger as docs/serverless.md explains. Nothing is
opened until the first invocation.
"""

from __future__ import annotations

import os

import azure.functions as func

from idemflow.azure_functions import register
from samples.survey.workflows import WORKFLOWS

CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"
STORE, QUEUE = os.environ["IDEMFLOW_STORE"], os.environ["IDEMFLOW_QUEUE"]

app = func.FunctionApp()
functions = register(
    app,
    WORKFLOWS,
    store=STORE,
    queue=QUEUE,
    connection=CONNECTION,
    name="survey",
    schedule="0 */1 * * * *",
    max_deliveries=5,  # at most host.json's maxDequeueCount: idemflow ends the request first
)
