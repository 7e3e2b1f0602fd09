"""A workflow for the worker-pool tests, importable by worker processes
(``idemflow worker tests.support.pool_workflows:WORKFLOWS``): each request holds a worker
thread in an effect until the test creates its gate file, then counts itself once. With
``job['calls']`` the effect appends ``start`` to that file when it begins and ``done`` when it
returns, so a test sees a call that was killed half-way."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, effect, workflow

GATE_WAIT = 300.0
"""Longest an effect waits for its gate (a test that never opens it still ends)."""


def wait_for_gate(gate: str, calls: str | None = None) -> bool:
    _note(calls, "start")
    deadline = time.monotonic() + GATE_WAIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    _note(calls, "done")
    return True


def _note(calls: str | None, what: str) -> None:
    if calls is not None:
        with open(calls, "a", encoding="utf-8") as file:
            file.write(what + "\n")


@workflow("held")
def held(job: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Wait in an effect until ``job['gate']`` exists, then count ``job['n']`` in ``job['space']``."""
    yield checkpoint()
    yield effect(lambda _key: wait_for_gate(job["gate"], job.get("calls")), name="gate")
    return (yield atomic("tablea", job["space"], lambda tx: _count(tx, job["n"]), name="count"))


def _count(tx: Tx, n: int) -> int:
    tx.increment(f"r{n}")
    return n


WORKFLOWS = [held]
