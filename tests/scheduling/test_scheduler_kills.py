"""Scheduler processes racing the same ticks, SIGKILLed at random and replaced: each tick is one
request, run once. Three processes walk the same simulated hours of a ten-minute schedule on a
store every process reaches (SQLite files, DynamoDB, Azure Tables); the test kills one at a random
moment of its walk three times, starts a fresh one in its place each time, and counts each tick once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from idemflow import open_store
from idemflow.client import rows
from idemflow.keys import RUNS_TABLE
from idemflow.stores.registry import Feature
from idemflow.worker import MemoryQueue, fire_schedules
from tests.conftest import TEST_TABLES, store_kinds
from tests.conftest import store_url as url_of
from tests.support.schedule_racer import EVERY10, T0

TICKS = 24
RACERS = 3


def racer(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.schedule_racer", url, str(TICKS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", store_kinds(Feature.SHARED))
def test_sigkilled_schedulers_start_each_tick_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_of(kind, request, f"k{uuid.uuid4().hex[:8]}", tmp_path, exact=False)
    store = open_store(url)
    store.create_tables(*TEST_TABLES)
    fire_schedules([EVERY10], store=store, queue=MemoryQueue(), clock=lambda: T0 - 1)  # first seen
    chooser = random.Random(44)
    racers = [racer(url) for _ in range(RACERS)]
    kills = 0
    try:
        while kills < 3:  # each kill lands mid-walk: after some ticks, a moment into the next one
            victim = chooser.randrange(RACERS)
            stdout = racers[victim].stdout
            assert stdout is not None
            for _ in range(chooser.randint(1, TICKS // 2)):
                assert stdout.readline().startswith("tick"), racers[victim].stderr
            time.sleep(chooser.uniform(0.0, 0.01))
            racers[victim].send_signal(signal.SIGKILL)
            racers[victim].wait()
            kills += 1
            racers[victim] = racer(url)
        outputs = [process.communicate(timeout=180) for process in racers]
    finally:
        for process in racers:
            if process.poll() is None:
                process.kill()
    assert all(process.returncode == 0 for process in racers), [err[-2000:] for _, err in outputs]
    assert all(out.split()[-1:] == ["done"] for out, _ in outputs)
    store.flush()
    ticks = [T0 + 600 * k for k in range(TICKS)]
    counted = {float(key[1:]): value for (partition, key), value in rows(store, "tablea").items()}
    assert counted == {tick: 1 for tick in ticks}
    ids = sorted(p for p, key, _ in store.scan(RUNS_TABLE) if key == "rsched-racer")
    assert ids == sorted(EVERY10.request_id(tick) for tick in ticks)
    assert kills == 3
