"""The engine's own structured log: one DEBUG event per run and per step, off unless asked."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from idemflow import Idem, atomic, run, workflow
from idemflow.stores import MemoryStore


def test_the_engine_logs_each_run_and_step_with_its_fields_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Operators see which request and step did what: structured DEBUG events, off by default."""
    store = MemoryStore()
    flow = _logged_transfer()
    with caplog.at_level(logging.INFO, logger="idemflow.engine"):
        run(flow(5), request_id="quiet", store=store)
    assert [r for r in caplog.records if r.name == "idemflow.engine"] == []  # nothing unless asked
    with caplog.at_level(logging.DEBUG, logger="idemflow.engine"):
        run(flow(5), request_id="loud", store=store)
        run(flow(5), request_id="loud", store=store)  # a duplicate
    events = [r for r in caplog.records if r.name == "idemflow.engine"]
    steps = [r for r in events if json.loads(r.getMessage())["event"] == "step"]
    runs = [r for r in events if json.loads(r.getMessage())["event"] == "run"]
    assert [(r.step, r.outcome, r.attempt) for r in steps[:2]] == [(1, "committed", 1), (2, "committed", 1)]  # type: ignore[attr-defined]
    assert all(r.workflow == "logged-transfer" and r.request_id == "loud" and r.version == 1 for r in events)  # type: ignore[attr-defined]
    assert all(r.seconds >= 0 for r in events)  # type: ignore[attr-defined]
    assert [(r.status, r.outcome) for r in runs] == [  # type: ignore[attr-defined]
        ("completed", "ran"),
        ("completed", "answered from earlier executions"),
    ]


def _logged_transfer() -> Any:
    @workflow("logged-transfer")
    def logged(amount: int) -> Generator[Idem[Any], Any, Any]:
        yield atomic("accounts", "ann", lambda tx: tx.increment("balance", -amount))
        yield atomic("accounts", "bob", lambda tx: tx.increment("balance", amount))
        return amount

    return logged


def test_worker_log_lines_start_with_a_utc_timestamp(caplog: pytest.LogCaptureFixture) -> None:
    """A worker's JSON lines are shipped as they are: each carries its own time, first."""
    from idemflow import checkpoint
    from idemflow.client import submit
    from idemflow.worker import MemoryQueue, Worker

    @workflow("timed")
    def flow(amount: int) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()  # the rest is a worker's
        yield atomic("accounts", "ann", lambda tx: tx.increment("balance", amount))
        return amount

    store, queue = MemoryStore(), MemoryQueue()
    submit(flow(5), request_id="timed", store=store, queue=queue)
    before = datetime.now(UTC)
    with caplog.at_level(logging.INFO, logger="idemflow.worker"):
        Worker([flow], store=store, queue=queue, wait=0.01).run(idle_timeout=0.1)
    after = datetime.now(UTC)
    lines = [r.getMessage() for r in caplog.records if r.name == "idemflow.worker"]
    assert lines and all(line.startswith('{"ts": "') for line in lines)
    for line in lines:
        stamp = datetime.fromisoformat(json.loads(line)["ts"])
        assert stamp.utcoffset() == timedelta(0)
        assert before - timedelta(milliseconds=1) <= stamp <= after
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", json.loads(line)["ts"])
