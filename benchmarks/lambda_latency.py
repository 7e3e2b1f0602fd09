"""``python -m benchmarks.lambda_latency [--requests N] [--http]``: one request finished by a Lambda
invocation vs by ``idemflow worker``'s message handling, on DynamoDB and SQS (moto on loopback);
with ``--http``, an ``http_handler`` request's first call against its duplicates.

Each round submits one survey request (its first step runs in ``submit``), receives its message
with the SDK, and times what finishes it:

- ``worker``: :meth:`~idemflow.async_worklist.Worker.handle` in this process (what an
  ``idemflow worker`` thread does with a received message);
- ``handler``: :func:`idemflow.aws_lambda.sqs_handler` called in this process with the message as
  a one-record SQS event (the worker's handling plus the event checks and the final flush);
- ``lambda``: the same event through AWS's runtime client in a warm sandbox
  (:mod:`tests.support.lambda_runtime`): the handler plus the Runtime API round trip and JSON.

The three kinds take turns within each round, so load on a shared machine hits them alike.

``--http`` times ``POST /orders`` (``tests.support.lambda_functions.orders``: one step) as an HTTP API
event: its first call, a duplicate in the same sandbox (answered from the handler's cache of
finished answers), and a duplicate in another sandbox (no cached answer: the run record is read),
each called in this process and through a warm ``awslambdaric`` sandbox.

Prints medians and quartiles in milliseconds; not part of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import boto3

from idemflow import open_store
from idemflow.async_worklist.queues.base import Message, decode_wire
from idemflow.aws_lambda import FixedContext, http_handler, sqs_handler
from idemflow.client import submit
from idemflow.testing.servers import moto_server
from idemflow.worker import Worker, open_queue
from tests.support.async_workflows import survey
from tests.support.lambda_events import http_event
from tests.support.lambda_functions import ORDER_OPTIONS, WORKFLOWS, place_order
from tests.support.lambda_runtime import Sandbox

KEY = "bench-key"
KINDS = ("worker", "handler", "lambda")


def _event(raw: dict[str, Any], queue: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": raw["MessageId"],
                "receiptHandle": raw["ReceiptHandle"],
                "body": raw["Body"],
                "attributes": {"ApproximateReceiveCount": raw["Attributes"]["ApproximateReceiveCount"]},
                "messageAttributes": {},
                "md5OfBody": raw["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
                "awsRegion": "us-east-1",
            }
        ]
    }


HTTP_KINDS = ("first call", "duplicate, same sandbox", "duplicate, other sandbox")


def _print(times: dict[str, list[float]], label: str) -> None:
    print(f"| {label} | median ms | quartiles ms | rounds |\n|---|---|---|---|")
    for kind, taken in times.items():
        q1, q2, q3 = statistics.quantiles(taken, n=4)
        print(f"| {kind} | {q2:.1f} | {q1:.1f}–{q3:.1f} | {len(taken)} |")


def http(requests: int) -> None:
    """An HTTP handler's first call against its duplicates, in this process and in sandboxes."""
    with moto_server() as moto:
        prefix = f"b{uuid.uuid4().hex[:8]}"
        store_url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix={prefix}"
        store = open_store(store_url)
        store.create_tables("tablea", "tableb")
        here = http_handler(store, **ORDER_OPTIONS)(place_order)
        elsewhere = http_handler(store, **{**ORDER_OPTIONS, "cache": None})(place_order)
        times: dict[str, list[float]] = {}
        env = {"IDEMFLOW_STORE_URL": store_url}
        with (
            Sandbox("tests.support.lambda_functions.orders", env) as one,
            Sandbox("tests.support.lambda_functions.orders", env) as two,
        ):
            ways: dict[str, tuple[Callable[[dict[str, Any]], Any], ...]] = {
                "in process": (
                    lambda e: here(e, FixedContext(60_000)),
                    lambda e: here(e, FixedContext(60_000)),
                    lambda e: elsewhere(e, FixedContext(60_000)),
                ),
                "lambda": (one.invoke, one.invoke, two.invoke),
            }
            for n in range(requests + 1):  # round 0 warms each up (clients, imports)
                for way, calls in ways.items():
                    key = f"{prefix}-{way}-{n}"
                    event = http_event("POST", "/orders", {"space": f"{prefix}-"}, {"Idempotency-Key": key})
                    for kind, call in zip(HTTP_KINDS, calls, strict=True):
                        started = time.perf_counter()
                        answer = call(event)
                        if n:
                            times.setdefault(f"{way}: {kind}", []).append(
                                (time.perf_counter() - started) * 1000
                            )
                        assert answer["statusCode"] == 201, answer
    _print(times, "http_handler, POST /orders")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lambda_latency")
    parser.add_argument("--requests", type=int, default=30, help="rounds (each finishes one of each kind)")
    parser.add_argument("--http", action="store_true", help="an HTTP handler's first call against duplicates")
    args = parser.parse_args(argv)
    if args.http:
        http(args.requests)
        return
    with moto_server() as moto:
        prefix = f"b{uuid.uuid4().hex[:8]}"
        store_url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix={prefix}"
        queue_url = f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=30"
        store = open_store(store_url)
        store.create_tables("tablea", "tableb")
        queue = open_queue(queue_url)
        client = boto3.client("sqs", endpoint_url=moto.endpoint, region_name=moto.region)
        url = client.get_queue_url(QueueName=prefix)["QueueUrl"]
        worker = Worker(WORKFLOWS, store=store, queue=queue, signing_key=KEY, relay_every=None)
        handler = sqs_handler(WORKFLOWS, store=store, queue=queue, signing_key=KEY)
        env = {"IDEMFLOW_STORE_URL": store_url, "IDEMFLOW_QUEUE_URL": queue_url, "IDEMFLOW_SIGNING_KEY": KEY}
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        with Sandbox("tests.support.lambda_functions.worker", env) as sandbox:
            finishers: dict[str, Callable[[dict[str, Any]], object]] = {
                "worker": lambda raw: worker.handle(
                    Message(raw["MessageId"], decode_wire(raw["Body"]), 1, raw["ReceiptHandle"])
                ),
                "handler": lambda raw: handler(_event(raw, prefix), FixedContext(60_000)),
                "lambda": lambda raw: sandbox.invoke(_event(raw, prefix)),
            }
            for n in range(args.requests + 1):  # round 0 warms each kind up (clients, imports)
                for kind in KINDS:
                    response = {"space": "s-", "user": f"{kind}{n}", "answer": "red", "at": [1]}
                    submit(
                        survey(response), request_id=f"{kind}-{n}", store=store, queue=queue, signing_key=KEY
                    )
                    raw: dict[str, Any] = client.receive_message(  # type: ignore[assignment]
                        QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=5, AttributeNames=["All"]
                    )["Messages"][0]
                    started = time.perf_counter()
                    finishers[kind](raw)
                    if n:
                        times[kind].append((time.perf_counter() - started) * 1000)
    _print(times, "finished by")


if __name__ == "__main__":
    main()
