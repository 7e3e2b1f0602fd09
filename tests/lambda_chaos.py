"""``python -m tests.lambda_chaos [--requests N] [--seed S] [--kill P]``: survey requests finished only
by Lambda invocations, with sandboxes SIGKILLed mid-invocation and SIGSTOPped after each answer.

Requests are submitted (every fourth twice) to DynamoDB and SQS on a moto server of its own;
then, until every request is final, the SQS messages are received as an event-source mapping
receives them (up to 10, visibility 2 s) and handed to ``tests.lambda_functions.worker`` in an
``awslambdaric`` sandbox (:mod:`tests.lambda_runtime`). With probability ``--kill`` the sandbox
is SIGKILLed at a random moment of the invocation and a new one started; otherwise it is
SIGSTOPped as soon as it answered, and every record it did not report as failed must already be
final. At the end each response is counted exactly once. Prints one line of counts; exits 1 on an
anomaly. Longer than a test (a minute or more): run by hand, not by pytest.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections import Counter
from typing import Any

from idemflow import open_store
from idemflow.client import submit
from idemflow.testing.servers import Moto, moto_server
from idemflow.worker import open_queue
from tests.async_workflows import survey
from tests.conftest import TEST_TABLES
from tests.lambda_runtime import EventSourceMapping, Sandbox, SandboxCounts
from tests.test_aws_lambda import KEY, final, request_of
from tests.workflows import rows_of

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
    sandbox = Sandbox("tests.lambda_functions.worker", env, counts)
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
                sandbox = Sandbox("tests.lambda_functions.worker", env, counts)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lambda_chaos")
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill", type=float, default=0.3, help="chance an invocation is SIGKILLed")
    args = parser.parse_args(argv)
    with moto_server() as moto:
        report = run(moto, args.requests, args.seed, args.kill)
    print(" ".join(f"{key}={value}" for key, value in report.items()))
    return 0 if report["counted_exactly_once"] and not report["acked_but_not_final"] else 1


if __name__ == "__main__":
    sys.exit(main())
