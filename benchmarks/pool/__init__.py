"""How fast ``idemflow worker --processes MIN:MAX`` follows a load step.

A burst of requests, each holding a worker thread in an effect until
released, lands on a pool of ``1:MAX`` processes of ``CONCURRENCY`` threads
(SQLite store and queue in one folder). Measured from the pool's own status
file (written at every sample): seconds from the start of the burst to the
grow decision, to MAX processes started, and to every thread holding a
request (the queue's in-flight count reaching MAX x CONCURRENCY: the
capacity is really there); then, once every request was released and
completed, seconds to the shrink decision (the cooldown is part of it) and
to MIN processes left running. Each round starts a fresh pool.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from benchmarks.pool.flows import held
from idemflow import open_store
from idemflow.client import RunStatus, status, submit
from idemflow.worker import open_queue

MAX, CONCURRENCY, SAMPLE_EVERY, COOLDOWN = 4, 4, 0.5, 5.0
TIMEOUT = 300.0


def _wait(condition: Callable[[], Any], timeout: float = TIMEOUT) -> float:
    """Seconds until ``condition()`` holds (polled every 20 ms)."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise TimeoutError("the pool did not get there")
        time.sleep(0.02)
    return time.monotonic() - began


def _status(path: Path) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"target": 0, "running": 0, "stopping": [], "stats": None, "decisions": []}
    return found


def _decided_at(path: Path, since: float) -> float:
    """Seconds from ``since`` (monotonic) to the pool's first grow decision (its wall-clock ``at``)."""
    first = _status(path)["decisions"][0]["at"]
    return float(first) - (time.time() - (time.monotonic() - since))


def one_round(folder: Path, requests: int) -> dict[str, float]:
    store_url, queue_url = f"sqlite:{folder / 'store.sqlite3'}", f"sqlite:{folder / 'queue.sqlite3'}"
    store = open_store(store_url, create=True)
    store.create_tables("tablea")
    queue = open_queue(queue_url)
    gate, path = folder / "gate", folder / "pool.json"
    command = [sys.executable, "-m", "idemflow", "worker", "benchmarks.pool.flows:WORKFLOWS"]
    command += ["--store", store_url, "--queue", queue_url, "--concurrency", str(CONCURRENCY)]
    command += ["--processes", f"1:{MAX}", "--scale-every", str(SAMPLE_EVERY)]
    command += ["--scale-cooldown", str(COOLDOWN), "--pool-status", str(path)]
    env = {key: value for key, value in os.environ.items() if key != "IDEMFLOW_SIGNING_KEY"}
    supervisor = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _status(path)["running"] == 1)
        space = f"b{uuid.uuid4().hex[:8]}-"
        burst_start = time.monotonic()
        for n in range(requests):
            job = {"gate": str(gate), "space": space, "n": n}
            submit(held(job), request_id=f"{space}{n}", store=store, queue=queue)
        burst = time.monotonic() - burst_start
        _wait(lambda: _status(path)["target"] > 1)
        decided = _decided_at(path, burst_start)
        _wait(lambda: _status(path)["running"] == MAX)
        started = time.monotonic() - burst_start
        busy = min(requests, MAX * CONCURRENCY)
        _wait(lambda: ((_status(path)["stats"] or {}).get("in_flight") or 0) >= busy)
        full = time.monotonic() - burst_start
        gate.touch()
        _wait(
            lambda: all(
                status(store, "pool_held", f"{space}{n}").status is RunStatus.COMPLETED
                for n in range(requests)
            )
        )
        done = time.monotonic()
        shrink = _wait(lambda: _status(path)["target"] == 1)
        _wait(lambda: _status(path)["running"] == 1 and not _status(path)["stopping"])
        return {
            "the burst (submits)": burst,
            "to grow decision": decided,
            "to MAX started": started,
            "to every thread busy": full,
            "to shrink decision": shrink,
            "to MIN running": time.monotonic() - done,
        }
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=TIMEOUT)
        queue.close()
        store.close()


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks pool", description=__doc__)
    parser.add_argument("--rounds", type=int, default=1 if quick else 5)
    parser.add_argument("--requests", type=int, default=MAX * CONCURRENCY * 2)
    args = parser.parse_args(argv)
    params = {
        "processes": f"1:{MAX}",
        "concurrency": CONCURRENCY,
        "requests": args.requests,
        "rounds": args.rounds,
        "scale_every": SAMPLE_EVERY,
        "cooldown": COOLDOWN,
        "backend": "sqlite",
    }
    report = Report("pool", "The worker pool under a load step", params, out)
    report.add(__doc__.split("\n\n", 1)[1].strip(), "")
    measured: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            for key, value in one_round(Path(folder), args.requests).items():
                measured.setdefault(key, []).append(value)
    rows = []
    for key, values in measured.items():
        rows.append([key, f"{statistics.median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}"])
        slug = key.replace("(submits)", "").strip().replace(" ", "_")
        report.headline(f"pool.sqlite.seconds.{slug}", round(statistics.median(values), 2), note=key)
    report.table(
        [
            "seconds from the burst's start (grow) or the last completion seen (shrink)",
            "median",
            "min",
            "max",
        ],
        rows,
    )
    report.add(
        f"The shrink includes the {COOLDOWN:g} s cooldown (`--scale-cooldown`); samples every "
        f"{SAMPLE_EVERY:g} s (`--scale-every`) bound how soon a change is seen. A process counts as "
        "started when it was spawned; 'every thread busy' is when the queue shows all "
        f"{MAX * CONCURRENCY} requests in flight, i.e. each process imported idemflow and the workflows, "
        "opened the store and queue, and received.",
        "",
    )
    report.data["rounds"] = measured
    report.write()
    return report
