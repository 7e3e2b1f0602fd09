"""The workflow of the pool benchmark, importable by the worker processes it starts
(``idemflow worker benchmarks.pool.flows:WORKFLOWS``): each request holds a worker thread in an
effect until its gate file exists, so the backlog stays until the benchmark releases it."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from idemflow import Idem, atomic, checkpoint, effect, workflow


def _wait_for(gate: str) -> bool:
    deadline = time.monotonic() + 600
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


@workflow("pool_held")
def held(job: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield checkpoint()
    yield effect(lambda _key: _wait_for(job["gate"]), name="gate")
    return (yield atomic("tablea", job["space"], lambda tx: tx.put(f"r{job['n']}", 1), name="done"))


WORKFLOWS = [held]
