"""The worker pool's stop grace (``--stop-grace``): a worker that does not stop within it is SIGKILLed.

Stand-in workers ignore SIGTERM (each says so in a file once its handler is set, so no SIGTERM
comes before it); the end-to-end case runs real workers whose request holds its thread in an
effect past the grace. No assertion is on elapsed time: on what was killed, the log lines and
what the request did afterwards.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from idemflow import open_store
from idemflow.async_worklist.pool.supervisor import Pool
from idemflow.client import RunStatus, status, submit
from idemflow.errors import InvalidValueError
from idemflow.worker import QueueStats, Scaling, open_queue
from tests.async_worklist.test_worker_pool import TIMEOUT, read_status, wait_for
from tests.conftest import TEST_TABLES
from tests.support.pool_workflows import held
from tests.support.workflows import rows_of

STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
time.sleep(600)
"""
"""A worker that ignores SIGTERM, writing ``<folder>/<pid>`` once it does."""


def stubborn_pool(folder: Path, wanted: list[int], **options: object) -> Pool:
    return Pool(
        [sys.executable, "-c", STUBBORN, str(folder)],
        minimum=1,
        maximum=2,
        concurrency=1,
        read_stats=lambda: QueueStats("q", 0, 0, 0, 0),
        policy=lambda view: Scaling(wanted[-1], "the test says so"),
        **options,  # type: ignore[arg-type]
    )


def ready(folder: Path, pool: Pool) -> bool:
    """Every worker of ``pool`` ignores SIGTERM by now."""
    return all((folder / str(child.process.pid)).exists() for child in pool._children)


def test_a_bad_stop_grace_is_refused_before_anything_starts(tmp_path: Path) -> None:
    for grace in (0, -1, float("nan"), float("inf"), True, "30"):
        with pytest.raises(InvalidValueError, match="--stop-grace"):
            stubborn_pool(tmp_path, [1], stop_grace=grace)
    status_path = tmp_path / "pool.json"
    command = [sys.executable, "-m", "idemflow", "worker", "tests.support.pool_workflows:WORKFLOWS"]
    urls = ["--store", f"sqlite:{tmp_path / 's.sqlite3'}", "--queue", f"sqlite:{tmp_path / 'q.sqlite3'}"]
    for grace in ("0", "-5", "nan", "soon"):
        options = ["--processes", "1:2", "--pool-status", str(status_path), "--stop-grace", grace]
        done = subprocess.run([*command, *urls, *options], capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 2 and "--stop-grace" in done.stderr, done.stderr
    assert not status_path.exists()  # no worker was started


def test_a_worker_shrunk_away_is_killed_once_its_grace_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On the pool's own clock: one tick before the grace ends it still runs, one after it is killed."""
    caplog.set_level(logging.INFO, "idemflow.pool")
    now, wanted = [0.0], [2]
    pool = stubborn_pool(tmp_path, wanted, stop_grace=20, clock=lambda: now[-1])
    try:
        pool.tick()
        wait_for(lambda: ready(tmp_path, pool), "two workers ignoring SIGTERM")
        oldest, youngest = (child.process for child in pool._children)
        wanted.append(1)
        now.append(100.0)
        pool.tick()
        assert pool._children[-1].stopping and pool._children[-1].signalled == 100.0
        now.append(119.5)
        pool.tick()
        assert youngest.poll() is None  # ignored SIGTERM, still within its grace
        now.append(120.0)
        pool.tick()
        assert youngest.wait(timeout=TIMEOUT) == -signal.SIGKILL
        pool.tick()
        assert [child.process for child in pool._children] == [oldest]
    finally:
        pool.stop()
        pool.stop()  # a second stop: no grace for the one left
        pool._shutdown()
    assert f"worker {youngest.pid} still running 20.0s after SIGTERM (--stop-grace 20)" in caplog.text
    assert f"worker {youngest.pid} stopped (exit -9)" in caplog.text


def test_shutdown_kills_what_outlives_the_grace(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "idemflow.pool")
    pool = stubborn_pool(tmp_path, [2], stop_grace=0.5, status_path=str(tmp_path / "pool.json"))
    pool.tick()
    wait_for(lambda: ready(tmp_path, pool), "two workers ignoring SIGTERM")
    processes = [child.process for child in pool._children]
    pool.stop()
    pool._shutdown()
    assert [process.returncode for process in processes] == [-signal.SIGKILL] * 2
    for process in processes:
        assert f"worker {process.pid} still running" in caplog.text
    assert "(--stop-grace 0.5); SIGKILL" in caplog.text
    assert read_status(tmp_path / "pool.json")["running"] == 0


def test_a_second_stop_kills_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With an hour's grace, shutting down ends only because :meth:`Pool.stop` is called again."""
    caplog.set_level(logging.INFO, "idemflow.pool")
    pool = stubborn_pool(tmp_path, [1], stop_grace=3600)
    pool.tick()
    wait_for(lambda: ready(tmp_path, pool), "a worker ignoring SIGTERM")
    process = pool._children[0].process
    pool.stop()
    stopping = threading.Thread(target=pool._shutdown)
    stopping.start()
    wait_for(lambda: pool._children[0].signalled is not None, "the SIGTERM")
    pool.stop()
    stopping.join(TIMEOUT)
    assert not stopping.is_alive() and process.returncode == -signal.SIGKILL
    assert f"worker {process.pid} still running" in caplog.text and "(asked to stop again)" in caplog.text


@pytest.mark.parametrize("second_signal", [False, True], ids=["grace", "second-sigterm"])
def test_a_worker_held_in_an_effect_is_killed_and_its_request_finishes_once_elsewhere(
    tmp_path: Path, second_signal: bool
) -> None:
    """``idemflow worker --processes 1:1``: its worker holds a request in an effect past the
    grace (or until a second SIGTERM); the supervisor kills it, logs it and exits 0; once the gate
    opens, a plain worker finishes the request, which commits its count once."""
    store_url = f"sqlite:{tmp_path / 'store.sqlite3'}"
    queue_url = f"sqlite:{tmp_path / 'queue.sqlite3'}?visibility_timeout=2"
    store = open_store(store_url, create=True)
    store.create_tables(*TEST_TABLES)
    queue = open_queue(queue_url)
    gate, calls, status_path, log = (tmp_path / name for name in ("gate", "calls", "pool.json", "pool.log"))
    env = {key: value for key, value in os.environ.items() if key != "IDEMFLOW_SIGNING_KEY"}
    command = [sys.executable, "-m", "idemflow", "worker", "tests.support.pool_workflows:WORKFLOWS"]
    options = ["--store", store_url, "--queue", queue_url, "--relay-every", "1"]
    grace = "600" if second_signal else "2"
    pool_options = ["--processes", "1:1", "--stop-grace", grace, "--pool-status", str(status_path)]
    space = f"k{uuid.uuid4().hex[:8]}-"
    job = {"gate": str(gate), "space": space, "n": 0, "calls": str(calls)}
    with open(log, "wb") as output:
        supervisor = subprocess.Popen(
            [*command, *options, *pool_options], env=env, stdout=output, stderr=subprocess.STDOUT
        )
    finisher: subprocess.Popen[bytes] | None = None
    try:
        submit(held(job), request_id=f"{space}0", store=store, queue=queue)
        wait_for(lambda: calls.exists() and calls.read_text() == "start\n", "the effect to begin")
        worker = read_status(status_path)["workers"][0]
        supervisor.send_signal(signal.SIGTERM)
        if second_signal:
            wait_for(lambda: "pool: SIGTERM: stopping" in log.read_text(), "the supervisor to stop")
            supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=TIMEOUT) == 0, log.read_text()
        text = log.read_text()
        why = "asked to stop again" if second_signal else "--stop-grace 2"
        assert f"pool: worker {worker} still running " in text and f"({why}); SIGKILL" in text, text
        assert f"pool: worker {worker} stopped (exit -9)" in text, text
        assert calls.read_text() == "start\n"  # killed inside the effect
        gate.touch()
        with open(tmp_path / "finisher.log", "wb") as output:
            finisher = subprocess.Popen(
                [*command, *options], env=env, stdout=output, stderr=subprocess.STDOUT
            )
        wait_for(
            lambda: status(store, "held", f"{space}0").status is RunStatus.COMPLETED, "the request to finish"
        )
        rows = rows_of(store, space).items()
        counted = {key: value for (table, _, key), value in rows if table == "tablea"}
    finally:
        for process in (supervisor, finisher):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=TIMEOUT)
        queue.close()
        store.close()
    assert calls.read_text() == "start\nstart\ndone\n"  # begun twice, returned once
    assert counted == {"r0": 1}
