"""Workload 10: flow control. A workflow limited to 2 at once, and a supplier's call limited to 2
at once from two workflows (``effect(..., group=)``), under 3 worker processes x 8 threads whose
slot holders are SIGKILLed mid-request.

Each round submits requests 2-3 times each to ``idemflow worker`` processes on one SQLite store
and queue. While they run, the driver kills a worker process that is inside the workflow or the
call (it holds a slot: its slot comes back only when its lease ends), takes the killed process's
entries out of the outside count (:mod:`samples.chaos.limits_flows`) and starts a replacement. A
monitor reads the count over and over: more than 2 inside either at any moment is an anomaly,
and so is a request that does not complete or a step applied twice.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from idemflow.client import RunStatus, status, submit
from idemflow.stores import SqliteStore
from idemflow.testing import data_rows
from idemflow.worker import open_queue
from samples.chaos import limits_flows as flows
from samples.chaos.report import Options, Totals
from samples.transfer.demo import reset

WORKERS, THREADS = 3, 8


def _worker(store: str, queue: str, counter: Path, key: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, flows.FILE_ENV: str(counter), "IDEMFLOW_SIGNING_KEY": key}
    command = [sys.executable, "-m", "idemflow.cli", "worker", "samples.chaos.limits_flows:WORKFLOWS"]
    command += ["--store", store, "--queue", queue, "--concurrency", str(THREADS), "--idle-timeout", "60"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def limits_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """One round (see the module's docstring)."""
    folder = opts.workdir / f"limits-{round_no}"
    folder.mkdir(parents=True, exist_ok=True)
    path, queue_path, counter = folder / "store.sqlite3", folder / "queue.sqlite3", folder / "inside.sqlite3"
    for file in (path, queue_path, counter):
        reset(file)
    flows.create(str(counter))
    store_url, queue_url = f"sqlite:{path}", f"sqlite:{queue_path}?visibility_timeout=2"
    store, queue, key = SqliteStore(path), open_queue(queue_url), secrets.token_hex(16)
    requests = 8 if opts.quick else 30  # of each of the three workflows
    sent = 0
    for n in range(requests):
        for flow, rid in ((flows.guarded, f"g{n}"), (flows.supplied, f"s{n}"), (flows.resupplied, f"r{n}")):
            for _ in range(rng.choice((2, 3))):
                submit(flow(n), request_id=rid, store=store, queue=queue, signing_key=key)
                sent += 1
    problems: list[str] = []
    stop, checks = threading.Event(), [0]

    def monitor() -> None:
        while not stop.wait(0.02):
            counts = flows.stats(str(counter))
            checks[0] += 1
            for kind, (_, peak) in counts.items():
                if peak > flows.SLOTS and not problems:
                    problems.append(f"while running: {peak} inside a {kind} limited to {flows.SLOTS}")

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    workers = [_worker(store_url, queue_url, counter, key) for _ in range(WORKERS)]
    kills, wanted = 0, 3 if opts.quick else 8
    deadline = time.monotonic() + (90 if opts.quick else 240)
    try:
        while time.monotonic() < deadline:
            done = sum(
                status(store, name, f"{name[0]}{n}").status is RunStatus.COMPLETED
                for name in ("guarded", "supplied", "resupplied")
                for n in range(requests)
            )
            if done == 3 * requests:
                break
            if kills < wanted and done >= kills * 3 * requests // (wanted + 1):
                kills += _kill_a_holder(workers, store_url, queue_url, counter, key, rng)
            time.sleep(0.05)
        else:
            problems.append(f"only {done} of {3 * requests} requests completed")
    finally:
        stop.set()
        watcher.join()
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
        queue.close()
    applied = {key: value for (_t, _p, key), value in data_rows(store, *flows.TABLES).items()}
    if set(applied.values()) - {1}:
        problems.append(f"a step applied more than once: {applied}")
    store.close()
    totals.requests += 3 * requests
    totals.submissions += sent
    totals.kills += kills
    totals.checks += checks[0]
    totals.anomalies += [f"limits round {round_no}: {p}" for p in problems]


def _kill_a_holder(
    workers: list[subprocess.Popen[bytes]],
    store_url: str,
    queue_url: str,
    counter: Path,
    key: str,
    rng: random.Random,
) -> int:
    """SIGKILL a worker process inside the workflow or the call (holding a slot), if one is; 1 if
    killed."""
    holders = {pid for pid, _ in flows.holders(str(counter))}
    victims = [i for i, worker in enumerate(workers) if worker.pid in holders]
    if not victims:
        return 0
    victim = rng.choice(victims)
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    flows.take_out(str(counter), workers[victim].pid)
    workers[victim] = _worker(store_url, queue_url, counter, key)
    return 1
