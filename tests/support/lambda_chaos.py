"""``python -m tests.support.lambda_chaos [--requests N] [--http-requests N] [--seed S] [--kill P]``: two
workloads run only by Lambda invocations, with sandboxes SIGKILLed mid-invocation and SIGSTOPped
after each answer (``make chaos`` runs both after the samples' chaos run).

**sqs**: survey requests finished only by Lambda invocations of the SQS handler.

Requests are submitted (every fourth twice) to DynamoDB and SQS on a moto server of its own;
then, until every request is final, the SQS messages are received as an event-source mapping
receives them (up to 10, visibility 2 s) and handed to ``tests.support.lambda_functions.worker`` in an
``awslambdaric`` sandbox (:mod:`tests.support.lambda_runtime`). With probability ``--kill`` the sandbox
is SIGKILLed at a random moment of the invocation and a new one started; otherwise it is
SIGSTOPped as soon as it answered, and every record it did not report as failed must already be
final. At the end each response is counted exactly once.

**http**: ``POST /orders`` through ``http_handler`` (``tests.support.lambda_functions.orders``) in two
sandboxes. Each request's client sends it until it gets an answer, to the same sandbox slot; with
probability ``--kill`` an attempt's sandbox is SIGKILLed at a random moment and a new one takes the
retry; every third request is also sent to the other sandbox at the same time (racing
duplicates); a sandbox is SIGSTOPped as soon as it answered, and the request must already be
final in the store; at the end every request is sent once more. Anomalies: an answer that is not
201, two answers of one request that differ, a replay without its ``Idempotent-Replayed`` header,
a request not final while its sandbox is frozen, an effect not counted exactly once.

Prints one line of counts per workload; exits 1 on an anomaly. Longer than a test (a minute or
more): ``make chaos`` runs it, not pytest.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from idemflow import open_store
from idemflow.aws_lambda import REPLAYED_HEADER
from idemflow.client import RunStatus, status, submit
from idemflow.testing.servers import Moto, moto_server
from idemflow.worker import open_queue
from tests.conftest import TEST_TABLES
from tests.integrations.test_aws_lambda import KEY, final, request_of
from tests.support.async_workflows import survey
from tests.support.lambda_events import ORDERS, http_event
from tests.support.lambda_runtime import EventSourceMapping, Sandbox, SandboxCounts
from tests.support.workflows import rows_of

ANSWERS = ("red", "green", "blue")


def run(moto: Moto, requests: int, seed: int, kill: float) -> dict[str, Any]:
    chooser = random.Random(seed)
    prefix = f"c{uuid.uuid4().hex[:8]}"
    store_url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix={prefix}"
    queue_url = f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=2"
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    queue = open_queue(queue_url)
    space = prefix + "-"
    expected: Counter[str] = Counter()
    for n in range(requests):
        answer = ANSWERS[n % 3]
        expected[answer] += 1
        response = {"space": space, "user": f"u{n}", "answer": answer, "at": [1]}
        for _ in range(1 + (n % 4 == 0)):
            submit(survey(response), request_id=f"{space}s{n}", store=store, queue=queue, signing_key=KEY)
    mapping = EventSourceMapping(moto.endpoint, moto.region, prefix)
    env = {"IDEMFLOW_STORE_URL": store_url, "IDEMFLOW_QUEUE_URL": queue_url, "IDEMFLOW_SIGNING_KEY": KEY}
    counts = SandboxCounts()
    sandbox = Sandbox("tests.support.lambda_functions.worker", env, counts)
    anomalies: list[tuple[str, str]] = []
    delivered = reported = killed_mid = 0
    started = time.monotonic()
    try:
        while not all(final(store, "survey", f"{space}s{n}") for n in range(requests)):
            if time.monotonic() - started > 900:
                raise TimeoutError(f"unfinished after 900 s: {counts}")
            event = mapping.batch()
            if event is None:
                continue
            delivered += len(event["Records"])
            if sandbox.frozen:
                sandbox.thaw()
            invocation = sandbox.invoke_async(event)
            if chooser.random() < kill:
                invocation.taken.wait(10)
                time.sleep(chooser.uniform(0.0, 0.4))  # a random moment of the invocation
                killed_mid += not invocation.done.is_set()
                sandbox.kill()
                sandbox.stop()
                sandbox = Sandbox("tests.support.lambda_functions.worker", env, counts)
                continue
            answer = invocation.result(60)
            sandbox.freeze()
            failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
            reported += len(failed)
            for record in event["Records"]:
                if record["messageId"] not in failed and not final(store, *request_of(record)):
                    anomalies.append(request_of(record))
    finally:
        sandbox.stop()
    store.flush()
    rows = rows_of(store, space)
    summary = {key: value for (table, part, key), value in rows.items() if table == "tableb"}
    responses = {key for (table, _, key) in rows if table == "tablea"}
    exact = summary == dict(expected) and responses == {f"u{n}" for n in range(requests)}
    return {
        "requests": requests,
        "records_delivered": delivered,
        "invocations": counts.invocations,
        "sigstops": counts.freezes,
        "sigkills": counts.kills,
        "sigkills_mid_invocation": killed_mid,
        "sandboxes": counts.sandboxes,
        "batch_item_failures": reported,
        "acked_but_not_final": len(anomalies),
        "counted_exactly_once": exact,
        "seconds": round(time.monotonic() - started),
    }


class _Slots:
    """The HTTP workload's sandboxes: thawed for an invocation, frozen after its answer, replaced
    when killed."""

    def __init__(self, env: dict[str, str], counts: SandboxCounts, size: int) -> None:
        self.env, self.counts = env, counts
        self.boxes = [Sandbox("tests.support.lambda_functions.orders", env, counts) for _ in range(size)]

    def invoke(self, slot: int, event: dict[str, Any]) -> Any:
        box = self.boxes[slot]
        if box.frozen:
            box.thaw()
        return box.invoke_async(event)

    def kill(self, slot: int) -> None:
        self.boxes[slot].kill()
        self.boxes[slot].stop()
        self.boxes[slot] = Sandbox("tests.support.lambda_functions.orders", self.env, self.counts)

    def stop(self) -> None:
        for box in self.boxes:
            box.stop()


def run_http(moto: Moto, requests: int, seed: int, kill: float) -> dict[str, Any]:
    chooser = random.Random(seed)
    prefix = f"h{uuid.uuid4().hex[:8]}"
    store_url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix={prefix}"
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    space = prefix + "-"
    counts = SandboxCounts()
    slots = _Slots({"IDEMFLOW_STORE_URL": store_url}, counts, 2)
    answers: dict[str, list[dict[str, Any]]] = {}
    anomalies: list[str] = []
    killed_mid = retries = 0
    started = time.monotonic()

    def attempt(slot: int, key: str, event: dict[str, Any], killable: bool) -> dict[str, Any] | None:
        nonlocal killed_mid
        invocation = slots.invoke(slot, event)
        if killable and chooser.random() < kill:
            invocation.taken.wait(10)
            time.sleep(chooser.uniform(0.0, 0.08))  # a random moment of the invocation
            killed_mid += not invocation.done.is_set()
            slots.kill(slot)
            return None
        answer: dict[str, Any] = invocation.result(60)
        slots.boxes[slot].freeze()  # at once: the request must be final already
        if status(store, ORDERS, key).status is not RunStatus.COMPLETED:
            anomalies.append(f"{key} answered but not final while its sandbox is frozen")
        return answer

    try:
        for n in range(requests):
            key = f"{space}o{n}"
            event = http_event("POST", "/orders", {"space": space, "item": n}, {"Idempotency-Key": key})
            got = answers.setdefault(key, [])
            if n % 3 == 0:  # a racing duplicate from another client, in the other sandbox
                racing = slots.invoke(1, event)
                first = attempt(0, key, event, killable=False)
                got += [racing.result(60), *([first] if first else [])]
                slots.boxes[1].freeze()
                continue
            while True:  # the client retries with the same key until it gets an answer
                answer = attempt(n % 2, key, event, killable=True)
                if answer is not None:
                    got.append(answer)
                    break
                retries += 1
        for n in range(requests):  # every request once more, later
            key = f"{space}o{n}"
            event = http_event("POST", "/orders", {"space": space, "item": n}, {"Idempotency-Key": key})
            late = attempt(chooser.randrange(2), key, event, killable=False)
            assert late is not None
            answers[key].append(late)
            if late["headers"].get(REPLAYED_HEADER) != "true":
                anomalies.append(f"{key}: a replay without its {REPLAYED_HEADER} header")
    finally:
        slots.stop()
    for key, got in answers.items():
        if any(a["statusCode"] != 201 for a in got):
            anomalies.append(f"{key}: answered {[a['statusCode'] for a in got]}")
        elif len({a["body"] for a in got}) != 1 or json.loads(got[0]["body"])["count"] != 1:
            anomalies.append(f"{key}: answers differ or count twice: {[a['body'] for a in got]}")
    store.flush()
    effects = {key: value for (table, part, key), value in rows_of(store, space).items() if part == "orders"}
    exact = effects == dict.fromkeys(answers, 1)
    return {
        "workload": "http",
        "requests": requests,
        "invocations": counts.invocations,
        "sigstops": counts.freezes,
        "sigkills": counts.kills,
        "sigkills_mid_invocation": killed_mid,
        "client_retries": retries,
        "sandboxes": counts.sandboxes,
        "anomalies": len(anomalies) + (not exact),
        "counted_exactly_once": exact,
        "seconds": round(time.monotonic() - started),
        **({"first_anomalies": anomalies[:3]} if anomalies else {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.lambda_chaos")
    parser.add_argument("--requests", type=int, default=150, help="survey requests of the sqs workload")
    parser.add_argument("--http-requests", type=int, default=90, help="requests of the http workload")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill", type=float, default=0.3, help="chance an invocation is SIGKILLed")
    parser.add_argument("--only", choices=("sqs", "http"), help="run one workload")
    parser.add_argument("--out", type=Path, help="append a table of the counts to this file (chaos.md)")
    args = parser.parse_args(argv)
    reports: list[dict[str, Any]] = []
    with moto_server() as moto:
        if args.only in (None, "sqs"):
            report = {"workload": "sqs", **run(moto, args.requests, args.seed, args.kill)}
            report["anomalies"] = report["acked_but_not_final"] + (not report["counted_exactly_once"])
            reports.append(report)
            print("[lambda chaos] " + " ".join(f"{key}={value}" for key, value in report.items()), flush=True)
        if args.only in (None, "http"):
            reports.append(run_http(moto, args.http_requests, args.seed, args.kill))
            print("[lambda chaos] " + " ".join(f"{k}={v}" for k, v in reports[-1].items()), flush=True)
    if args.out is not None:
        with args.out.open("a") as out:
            out.write(_table(reports, args))
    return 1 if any(report["anomalies"] for report in reports) else 0


def _table(reports: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The Lambda chaos run as a section of the chaos report."""
    rows = "".join(
        f"| {r['workload']} | {r['requests']} | {r['invocations']} | {r['sigkills']} "
        f"({r['sigkills_mid_invocation']}) | {r['sigstops']} | {r['sandboxes']} | {r['seconds']} | "
        f"{r['anomalies']} |\n"
        for r in reports
    )
    return (
        f"\n## Lambda\n\n`python -m tests.support.lambda_chaos --seed {args.seed} --kill {args.kill}`: "
        "the handlers inside awslambdaric sandboxes on moto (sqs: survey requests finished by the SQS "
        "handler; http: POST /orders through http_handler, retried by its clients, racing copies in two "
        "sandboxes).\n\n"
        "| workload | requests | invocations | SIGKILLs (mid-invocation) | SIGSTOPs | sandboxes | s | "
        "anomalies |\n|---|---:|---:|---:|---:|---:|---:|---:|\n" + rows
    )


if __name__ == "__main__":
    sys.exit(main())
