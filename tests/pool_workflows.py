"""A workflow for the worker-pool tests, importable by worker processes
(``idemflow worker tests.pool_workflows:WORKFLOWS``): each request holds a worker
thread in an effect until the test creates its gate file, then counts itself once."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, effect, workflow

GATE_WAIT = 300.0
"""Longest an effect waits for its gate (a test that never opens it still ends)."""


def wait_for_gate(gate: str) -> bool:
    deadline = time.monotonic() + GATE_WAIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


@workflow("held")
def held(job: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Wait in an effect until ``job['gate']`` exists, then count ``job['n']`` in ``job['space']``."""
    yield checkpoint()
    yield effect(lambda _key: wait_for_gate(job["gate"]), name="gate")
    return (yield atomic("tablea", job["space"], lambda tx: _count(tx, job["n"]), name="count"))


def _count(tx: Tx, n: int) -> int:
    tx.increment(f"r{n}")
    return n


WORKFLOWS = [held]
