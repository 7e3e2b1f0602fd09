"""Worker processes killed with SIGKILL while draining a queue: nothing lost, nothing doubled.

Real ``idemflow worker`` processes (the CLI: one on threads, one ``--asyncio``) drain a queue of checkpointed
survey workflows; the test kills random workers at random moments and starts
replacements until every request completed, then checks that each response
was counted exactly once. Runs on SQLite (store + queue in files) and on the
real servers (DynamoDB + SQS on moto, Azure Tables + Queue on Azurite). A
process that dies right after it reported an outcome (a worker's ack,
``submit`` returning a final handle) must have written it durably first, on
both APIs (``AsyncWorker`` and ``asubmit`` on the asynchronous stores).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from idemflow import open_store
from idemflow.client import RequestStatus, RunStatus, status, submit
from idemflow.stores import Store
from idemflow.stores.registry import Feature
from idemflow.worker import Queue, open_queue
from tests.conftest import TEST_TABLES, paired_queue_url, store_kinds
from tests.conftest import store_url as url_of
from tests.support.async_workflows import survey
from tests.support.workflows import rows_of

KEY = "crash-test-key"
ANSWERS = ("red", "green", "blue")


def start_worker(store_url: str, queue_url: str, *, asyncio: bool = False) -> subprocess.Popen[bytes]:
    """An ``idemflow worker`` process: on threads, or on an event loop (``--asyncio``)."""
    env = {**os.environ, "IDEMFLOW_SIGNING_KEY": KEY}
    command = [
        sys.executable,
        "-m",
        "idemflow.cli",
        "worker",
        "tests.support.async_workflows:WORKFLOWS",
        "--store",
        store_url,
        "--queue",
        queue_url,
        "--concurrency",
        "2",
        "--idle-timeout",
        "3",
        *(["--asyncio"] if asyncio else []),
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def drain_with_kills(
    store: Store, store_url: str, queue_url: str, space: str, requests: int, kills: int, seed: int
) -> int:
    chooser = random.Random(seed)
    queue: Queue = open_queue(queue_url)
    expected: Counter[str] = Counter()
    for n in range(requests):
        answer = ANSWERS[n % 3]
        expected[answer] += 1
        response = {"space": space, "user": f"u{n}", "answer": answer, "at": [1]}
        for _ in range(1 + (n % 4 == 0)):  # every fourth request submitted twice
            submit(survey(response), request_id=f"{space}{n}", store=store, queue=queue, signing_key=KEY)
    # One worker on threads, one on an event loop: each slot restarts as what it was.
    flavours = (False, True)
    workers = [start_worker(store_url, queue_url, asyncio=flavour) for flavour in flavours]
    killed = busy = 0
    deadline = time.monotonic() + 240
    try:
        # Every kill is made, each while the other worker may be mid-request (reading the whole
        # table between kills let a fast pair of workers finish before the last ones).
        while killed < kills:
            time.sleep(chooser.uniform(0.05, 0.25))
            busy += queue.approximate_size() > 0  # messages left: the kill lands among the work
            victim = chooser.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            killed += 1
            workers[victim] = start_worker(store_url, queue_url, asyncio=flavours[victim])
        while time.monotonic() < deadline:
            done = sum(
                status(store, "survey", f"{space}{n}").status is RunStatus.COMPLETED for n in range(requests)
            )
            if done == requests:
                break
            time.sleep(0.2)
            workers = [
                w if w.poll() is None else start_worker(store_url, queue_url, asyncio=flavour)
                for w, flavour in zip(workers, flavours, strict=True)
            ]
        else:
            raise AssertionError(f"only {done} of {requests} finished")
    finally:
        queue.close()
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
    assert busy >= kills // 2, f"only {busy} of {kills} kills landed while messages were left"
    store.flush()
    rows = rows_of(store, space)
    counts = {key: value for (table, _, key), value in rows.items() if table == "tableb"}
    assert counts == dict(expected)  # each response counted exactly once
    responses = {key for (table, _, key) in rows if table == "tablea"}
    assert responses == {f"u{n}" for n in range(requests)}
    return killed


@pytest.mark.slow
def test_sigkilled_sqlite_workers_lose_and_double_nothing(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'store.sqlite3'}"
    queue_url = f"sqlite:{tmp_path / 'queue.sqlite3'}?visibility_timeout=2"
    store = open_store(store_url)
    killed = drain_with_kills(store, store_url, queue_url, "s-", requests=1200, kills=10, seed=7)
    assert killed == 10


@pytest.mark.slow
@pytest.mark.parametrize("kind", store_kinds(Feature.SERVER, Feature.SHARED))
def test_sigkilled_workers_on_servers(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """On every server backend (DynamoDB on moto, on AWS's own engine with the submitter and
    both workers meeting its conflicts, Azure Tables), each beside a queue on a server."""
    prefix = f"k{uuid.uuid4().hex[:8]}"
    store_url = url_of(kind, request, prefix, tmp_path, exact=False)
    queue_url = paired_queue_url(kind, request, prefix, tmp_path, visibility_timeout=2)
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    drain_with_kills(store, store_url, queue_url, f"{prefix}-", requests=60, kills=3, seed=11)


def test_sigterm_stops_a_worker_gracefully(tmp_path: Path) -> None:
    """SIGTERM: the worker stops taking messages, finishes what it holds and exits 0."""
    store_url = f"sqlite:{tmp_path / 'store.sqlite3'}"
    queue_url = f"sqlite:{tmp_path / 'queue.sqlite3'}?visibility_timeout=60"
    store = open_store(store_url)
    queue = open_queue(queue_url)
    requests = 300
    for n in range(requests):
        response = {"space": "g-", "user": f"u{n}", "answer": ANSWERS[n % 3], "at": [1]}
        submit(survey(response), request_id=f"g-{n}", store=store, queue=queue, signing_key=KEY)
    command = [sys.executable, "-m", "idemflow.cli", "worker", "tests.support.async_workflows:WORKFLOWS"]
    options = ["--store", store_url, "--queue", queue_url, "--concurrency", "2"]
    env = {**os.environ, "IDEMFLOW_SIGNING_KEY": KEY}
    worker = subprocess.Popen(
        [*command, *options], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    while status(store, "survey", "g-0").status is not RunStatus.COMPLETED and worker.poll() is None:
        time.sleep(0.02)
    worker.send_signal(signal.SIGTERM)
    _, output = worker.communicate(timeout=60)  # log events and progress both go to stderr
    assert worker.returncode == 0
    assert b"finished" in output
    # Nothing is left hidden by the stopped worker: a fresh one (visibility 60 s) drains the rest at once.
    follower = start_worker(store_url, queue_url)
    assert follower.wait(timeout=120) == 0
    done = [status(store, "survey", f"g-{n}").status for n in range(requests)]
    assert done.count(RunStatus.COMPLETED) == requests
    counts = {key: value for (table, _, key), value in rows_of(store, "g-").items() if table == "tableb"}
    assert counts == {"red": 100, "green": 100, "blue": 100}
    queue.close()


ROOT = Path(__file__).resolve().parents[2]
DIE_RIGHT_AFTER = """
import os, sys
from idemflow import open_store
from idemflow.client import submit
from idemflow.worker import MemoryQueue, Worker
from tests.support.async_workflows import WORKFLOWS, survey

what, store_url, space = sys.argv[1:]
store, queue = open_store(store_url), MemoryQueue()
response = {"space": space, "user": "u", "answer": "red", "at": [1] if what == "worker" else []}
submit(survey(response), request_id=space, store=store, queue=queue)
if what == "submit":  # no checkpoint: the request finished in submit, which returned a final handle
    os._exit(0)  # at once: no close(), no flush(); background threads die with the process
ack = queue.ack

def ack_and_die(message):
    ack(message)
    os._exit(0)

queue.ack = ack_and_die
[message] = queue.receive()
Worker(WORKFLOWS, store=store, queue=queue).handle(message)
os._exit(3)  # not acked
"""


ADIE_RIGHT_AFTER = """
import asyncio, os, sys
from idemflow.client import asubmit
from idemflow.worker import AsyncWorker, MemoryQueue
from idemflow.async_worklist.queues.async_adapters import to_async_queue
from idemflow import open_async_store
from tests.support.async_workflows import WORKFLOWS, survey

what, store_url, space = sys.argv[1:]

async def main():
    store, held = open_async_store(store_url), MemoryQueue()
    queue = to_async_queue(held)
    response = {"space": space, "user": "u", "answer": "red", "at": [1] if what == "worker" else []}
    await asubmit(survey(response), request_id=space, store=store, queue=queue)
    if what == "submit":  # finished in asubmit, which returned a final handle: die with tasks pending
        os._exit(0)
    ack = held.ack

    def ack_and_die(message):
        ack(message)
        os._exit(0)

    held.ack = ack_and_die
    [message] = await queue.receive()
    await AsyncWorker(WORKFLOWS, store=store, queue=queue).handle(message)
    os._exit(3)  # not acked

asyncio.run(main())
"""


@pytest.mark.parametrize("api", ["blocking", "asyncio"])
@pytest.mark.parametrize("what", ["submit", "worker"])
@pytest.mark.parametrize("backend", store_kinds(Feature.SHARED))
def test_a_process_dying_right_after_it_reported_an_outcome_loses_nothing(
    backend: str, what: str, api: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On every backend other processes reach (the registry's ``shared`` test beds)."""
    prefix = f"d{uuid.uuid4().hex[:8]}"
    store_url = url_of(backend, request, prefix, tmp_path, exact=False)
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    space = f"{prefix}-"
    script = DIE_RIGHT_AFTER if api == "blocking" else ADIE_RIGHT_AFTER
    command = [sys.executable, "-c", script, what, store_url, space]
    died = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert died.returncode == 0, died.stderr
    assert status(store, "survey", space) == RequestStatus(RunStatus.COMPLETED, {"counted": "red"})
    store.close()
