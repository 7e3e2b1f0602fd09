"""The engine's own structured log: one DEBUG event per run and per step, off unless asked."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from idemflow import BackendError, Idem, atomic, checkpoint, run, send, workflow
from idemflow.async_worklist.deliver import arun_announcing
from idemflow.async_worklist.outbox import DEFAULT_GRACE, arelay, relay
from idemflow.client import submit
from idemflow.keys import RUNS_TABLE, outbox_key, outbox_partition
from idemflow.stores import MemoryStore
from idemflow.stores.base import Committed, Insert, RowRef
from idemflow.worker import MemoryQueue


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


class DownQueue(MemoryQueue):
    """A queue whose sends fail: what submit and a ``send`` step could not send is the relay's."""

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise BackendError("injected: the queue is down", backend="memory")


@workflow("relayed-order")
def relayed_order(n: int) -> Generator[Idem[Any], Any, Any]:
    yield atomic("accounts", "ann", lambda tx: tx.increment("orders"))
    yield checkpoint()
    return n


@workflow("relayed-notice")
def relayed_notice(to: str) -> Generator[Idem[Any], Any, Any]:
    yield send("relayed-order", to, "notice", "hello")
    return "noticed"


def request_events(caplog: pytest.LogCaptureFixture, logger: str) -> list[dict[str, Any]]:
    """The events of ``idemflow.<logger>`` (the engine's DEBUG ones excepted: not the relay's)."""
    return [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == f"idemflow.{logger}" and r.levelno >= logging.INFO
    ]


@pytest.mark.parametrize("relaying", ["relay", "arelay"])
def test_every_relay_log_event_names_the_workflow_version_and_request_id(
    caplog: pytest.LogCaptureFixture, relaying: str
) -> None:
    store, down = MemoryStore(), DownQueue()
    with caplog.at_level(logging.INFO, logger="idemflow"):
        submit(relayed_order(1), request_id="r-1", store=store, queue=down)  # left in the outbox
        noticed = arun_announcing(relayed_notice("r-1"), request_id="n-1", store=store, queue=down)
        assert asyncio.run(noticed) == "noticed"  # its wake-up could not be sent: the relay's
        unreadable = RowRef(RUNS_TABLE, outbox_partition("r-2"), outbox_key("relayed-order", "r-2"))
        assert isinstance(store.commit([Insert(unreadable, {"no": "entry"}, '{"no":"entry"}')]), Committed)
        later = lambda: time.time() + DEFAULT_GRACE + 1  # noqa: E731 - every entry is due
        queue = MemoryQueue()
        sent = (
            relay(store, queue, clock=later)
            if relaying == "relay"
            else asyncio.run(arelay(store, queue, clock=later))
        )
    assert sent == 2 and queue.approximate_size() == 2
    events = [event for logger in ("submit", "engine", "relay") for event in request_events(caplog, logger)]
    assert sorted(event["event"] for event in events) == [
        "outbox-entry-unreadable",
        "relayed",
        "relayed",
        "send-failed-left-to-the-relay",
        "send-failed-left-to-the-relay",
    ]
    for event in events:
        assert {"ts", "workflow", "version", "request_id"} <= set(event), event
    assert {(e["workflow"], e["request_id"], e.get("entry")) for e in events if e["event"] == "relayed"} == {
        ("relayed-order", "r-1", "continuation"),
        ("relayed-order", "r-1", "wake-up"),
    }
    assert [(e["workflow"], e["request_id"]) for e in events if e["event"] == "outbox-entry-unreadable"] == [
        ("relayed-order", "r-2")
    ]
