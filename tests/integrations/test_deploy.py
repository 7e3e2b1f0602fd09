"""Deploys, crashes between commit and send, oversize inputs: real ``idemflow worker`` processes.

Deploys and crashes between commit and send, met the way an operator meets them: worker
processes started from the CLI, stopped with SIGTERM, a client process killed
with SIGKILL, on SQLite (store + queue in files), on moto (DynamoDB + SQS) and
on Azurite (Azure Tables + Azure Queue). Nothing is timed: the test polls
``status`` (and the queue) until a deadline and then checks the tables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from idemflow import open_store
from idemflow.client import RunStatus, status, submit
from idemflow.errors import LimitExceededError
from idemflow.keys import OUTBOX, RUNS_TABLE, outbox_partitions
from idemflow.stores import Store
from idemflow.testing.servers import Azurite, Moto
from idemflow.worker import Queue, open_queue
from tests.conftest import TEST_TABLES
from tests.support.checkout_workflows import checkout_v1, checkout_v2
from tests.support.workflows import rows_of

ROOT = Path(__file__).resolve().parents[2]
KEY = "deploy-test-key"
DEADLINE = 45.0
"""Seconds a condition may take to come true; reached only when something is broken."""
BACKENDS = [
    "sqlite",
    pytest.param("dynamodb", marks=pytest.mark.cloud),
    pytest.param("azure", marks=pytest.mark.cloud),
]


@dataclass
class Backend:
    """One store and queue, shared by the test process and the worker processes it starts."""

    store_url: str
    queue_url: str
    store: Store
    queue: Queue
    space: str
    logs: Path
    workers: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)

    def start(self, workflows: str, *, relay_every: float = 0.5) -> subprocess.Popen[bytes]:
        """An ``idemflow worker`` process holding the workflows ``workflows`` names."""
        command = [
            sys.executable,
            "-m",
            "idemflow.cli",
            "worker",
            f"tests.support.checkout_workflows:{workflows}",
        ]
        options = ["--store", self.store_url, "--queue", self.queue_url, "--version-wait", "0.5"]
        options += ["--relay-every", str(relay_every), "--max-deliveries", "50"]
        log = (self.logs / f"worker-{len(self.workers)}.log").open("wb")
        env = {**os.environ, "IDEMFLOW_SIGNING_KEY": KEY}
        worker = subprocess.Popen([*command, *options], cwd=ROOT, env=env, stdout=log, stderr=log)
        self.workers.append((worker, log))
        return worker

    def stop(self, worker: subprocess.Popen[bytes]) -> str:
        """SIGTERM: the worker finishes what it holds and exits 0; its log."""
        self.stopped.add(worker.pid)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, self.tail()
        return self.log_of(worker)

    def log_of(self, worker: subprocess.Popen[bytes]) -> str:
        index = [started for started, _ in self.workers].index(worker)
        return (self.logs / f"worker-{index}.log").read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.log_of(worker)[-1500:] for worker, _ in self.workers)

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not condition():
            for worker, _ in self.workers:
                assert worker.pid in self.stopped or worker.poll() is None, f"a worker exited\n{self.tail()}"
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {DEADLINE}s: {what}\n{self.tail()}")
            time.sleep(0.05)

    def status(self, request_id: str) -> Any:
        return status(self.store, "checkout", request_id)

    def rows(self) -> dict[tuple[str, str, str], Any]:
        return rows_of(self.store, self.space)

    def outbox(self) -> list[str]:
        """This space's outbox entries: continuations committed as due and not sent yet."""
        return [
            key
            for partition in outbox_partitions()
            for _, key, _ in self.store.scan(RUNS_TABLE, partition)
            if key.startswith(OUTBOX) and self.space in key
        ]

    def submit(self, flow: Callable[[dict[str, Any]], Any], name: str, **extra: Any) -> str:
        request_id = self.space + name
        order = {"space": self.space, "id": name, "amount": 10, **extra}
        submit(flow(order), request_id=request_id, store=self.store, queue=self.queue, signing_key=KEY)
        return request_id

    def drained(self) -> None:
        """Once every request finished: nothing queued, nothing dead-lettered, nothing left to relay."""
        self.wait_until(lambda: self.queue.approximate_size() == 0, "the queue empties")
        assert self.queue.dead_letters() == []
        self.store.flush()  # submit deletes its outbox entry as a deferred cache write
        assert self.outbox() == []


@pytest.fixture
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    kind = request.param
    prefix = f"dp{uuid.uuid4().hex[:10]}"  # letters and digits: Azure table and queue names, SQS names
    if kind == "sqlite":
        store_url = f"sqlite:{tmp_path / 'store.sqlite3'}"
        queue_url = f"sqlite:{tmp_path / 'queue.sqlite3'}?visibility_timeout=5"
    elif kind == "dynamodb":
        moto: Moto = request.getfixturevalue("moto")
        where = f"endpoint={moto.endpoint}&region={moto.region}"
        store_url = f"dynamodb:?{where}&prefix={prefix}"
        queue_url = f"sqs:{prefix}?{where}&visibility_timeout=5"
    else:
        azurite: Azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
        store_url = f"azure:?prefix={prefix}"
        queue_url = f"azure-queue:{prefix}?visibility_timeout=5"
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    queue = open_queue(queue_url)
    backend = Backend(store_url, queue_url, store, queue, prefix + "x", tmp_path)
    try:
        yield backend
    finally:
        for worker, log in backend.workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            log.close()
        queue.close()
        store.close()


def balance(backend: Backend) -> Any:
    return backend.rows().get(("tablea", "wallet", "balance"))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_deploying_v2_while_v1_requests_are_in_flight(backend: Backend) -> None:
    old = [backend.submit(checkout_v1, f"old{n}") for n in range(4)]
    assert balance(backend) == -40  # debited before the checkpoint, in submit
    # The deploy goes wrong first: the workers restart holding v2 only.
    only_v2 = backend.start("V2")

    def all_waiting_for_v1() -> bool:
        for request_id in old:
            now = backend.status(request_id)
            if (now.status, now.version) != (RunStatus.RUNNING, 1) or "version 1" not in (now.waiting or ""):
                return False
        return True

    backend.wait_until(all_waiting_for_v1, "every v1 request says it waits for version 1")
    backend.wait_until(
        lambda: backend.log_of(only_v2).count('"event": "waiting"') >= 2 * len(old),
        "the v2 worker gave every v1 request back at least twice (on average)",
    )
    log = backend.stop(only_v2)
    assert '"event": "finished"' not in log and '"event": "dead-letter"' not in log
    rows = backend.rows()
    assert rows.get(("tablea", "wallet", "balance")) == -40  # nothing ran on v2's code: no second debit
    assert [row for row in rows if row[0] == "tableb"] == []  # no fraud check, nothing shipped
    assert [backend.status(r).status for r in old] == [RunStatus.RUNNING] * len(old)

    # Fixed: workers holding v1 and v2. Old requests finish on v1, new ones start on v2.
    both = backend.start("V1_AND_V2")
    new = [backend.submit(checkout_v2, f"new{n}") for n in range(3)]

    def all_finished() -> bool:
        return all(backend.status(r).status is RunStatus.COMPLETED for r in [*old, *new])

    backend.wait_until(all_finished, "every request completes")
    for request_id in old:
        done = backend.status(request_id)
        assert (done.result, done.version, done.waiting) == ({"version": 1, "shipped": "shipped"}, 1, None)
    for request_id in new:
        done = backend.status(request_id)
        assert (done.result, done.version) == ({"version": 2, "shipped": "shipped"}, 2)
    rows = backend.rows()
    assert rows[("tablea", "wallet", "balance")] == -10 * (len(old) + len(new))  # one debit each
    assert rows[("tableb", "fraud", "checked")] == len(new)  # v2 requests only
    shipped = {key: value for (table, partition, key), value in rows.items() if partition == "shipments"}
    assert shipped == {r.removeprefix(backend.space): {"items": 0} for r in [*old, *new]}
    backend.drained()
    backend.stop(both)


CRASH_BETWEEN_COMMIT_AND_SEND = """
import os, signal, sys
from idemflow import open_store
from idemflow.client import submit
from idemflow.worker import open_queue
from idemflow.errors import QueueError
from tests.support.checkout_workflows import checkout_v1

store_url, queue_url, space, key, requests = sys.argv[1:]
store, queue = open_store(store_url), open_queue(queue_url)

class Failing:
    '''The real queue, but its send fails: down for the first requests, then the process dies.'''

    def __init__(self, queue, die):
        self.queue, self.die = queue, die

    def __getattr__(self, name):
        return getattr(self.queue, name)

    def send(self, body, *, delay=0.0):
        if self.die:
            os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before the pointer is sent
        raise QueueError("queue down")

last = int(requests) - 1
for n in range(last + 1):
    order = {"space": space, "id": f"o{n}", "amount": 10}
    queue_now = Failing(queue, die=n == last)
    pending = submit(checkout_v1(order), request_id=f"{space}{n}", store=store, queue=queue_now,
                     signing_key=key, grace=0.5)
    assert pending.outcome is None  # accepted, left running: the relay will send it
sys.exit(3)  # never reached: the last send killed the process
"""


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_client_killed_between_commit_and_send_is_finished_by_the_relay(backend: Backend) -> None:
    requests = 3
    command = [sys.executable, "-c", CRASH_BETWEEN_COMMIT_AND_SEND]
    args = [backend.store_url, backend.queue_url, backend.space, KEY, str(requests)]
    died = subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    ids = [f"{backend.space}{n}" for n in range(requests)]
    # Committed, never sent: debited, running, one outbox entry each, an empty queue.
    assert [backend.status(r).status for r in ids] == [RunStatus.RUNNING] * requests
    assert balance(backend) == -10 * requests
    assert len(backend.outbox()) == requests
    assert backend.queue.approximate_size() == 0

    worker = backend.start("V1", relay_every=0.2)
    backend.wait_until(
        lambda: all(backend.status(r).status is RunStatus.COMPLETED for r in ids),
        "the relay's pointers finish",
    )
    assert [backend.status(r).result for r in ids] == [{"version": 1, "shipped": "shipped"}] * requests
    rows = backend.rows()
    assert rows[("tablea", "wallet", "balance")] == -10 * requests  # exactly once each
    assert {key for (_, partition, key) in rows if partition == "shipments"} == {
        f"o{n}" for n in range(requests)
    }
    backend.drained()
    log = backend.stop(worker)
    assert log.count('"event": "relayed"') == requests  # each sent once, then cleared


@pytest.mark.parametrize(
    ("backend", "size"),
    [pytest.param("azure", 70_000, marks=pytest.mark.cloud), ("sqlite", 300_000)],
    indirect=["backend"],
)
def test_an_input_larger_than_the_queue_allows_completes(backend: Backend, size: int) -> None:
    order = {"space": backend.space, "id": "big", "amount": 10, "items": "i" * size}
    with pytest.raises(LimitExceededError):  # the input itself could never travel on this queue
        backend.queue.send(json.dumps(order))
    worker = backend.start("V1")
    request_id = backend.submit(checkout_v1, "big", items=order["items"])
    backend.wait_until(lambda: backend.status(request_id).status is RunStatus.COMPLETED, "the big request")
    assert backend.status(request_id).result == {"version": 1, "shipped": "shipped"}
    rows = backend.rows()
    assert rows[("tablea", "wallet", "balance")] == -10
    assert rows[("tableb", "shipments", "big")] == {"items": size}  # the worker read the whole input
    backend.drained()
    backend.stop(worker)
