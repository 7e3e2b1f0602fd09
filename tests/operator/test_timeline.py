"""``idemflow runs show``: a request's steps read from its memos, on every store, never writing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import (
    Idem,
    RequestFailedError,
    StepRetry,
    atomic,
    checkpoint,
    close_stream,
    effect,
    receive,
    set_event,
    workflow,
    write_stream,
)
from idemflow.admin import ashow, show
from idemflow.client import RunStatus, send_message, submit
from idemflow.stores import SqliteStore, Store
from idemflow.worker import MemoryQueue, Worker
from tests.cli.test_cli import idemflow
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.workflows import data_rows

DOWN = [0]
"""How many more times the fake provider fails."""


def charge(key: str) -> dict[str, str]:
    if DOWN[0]:
        DOWN[0] -= 1
        raise ConnectionError("provider down")
    return {"charge": key[:8]}


@workflow("show-booking", retry=StepRetry(initial=30, maximum_attempts=10))
def booking(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["space"] + "seats", lambda tx: tx.increment("held"), name="hold")
    yield checkpoint()
    paid = yield effect(charge, name="charge")
    confirmed = yield receive("confirm")
    return {"paid": paid, "confirmed": confirmed}


FLOWS = [booking]


def everything(store: Store) -> dict[Any, Any]:
    return {
        **data_rows(store, "tablea"),
        **{("runs", p, k): r.value for p, k, r in store.scan("idemflowruns")},
    }


def test_show_lists_the_steps_where_a_request_is_and_what_it_waits_for(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    submit(booking({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    at_checkpoint = show(store, FLOWS, "show-booking", space)
    assert [(s.number, s.kind, s.name, s.outcome) for s in at_checkpoint.steps] == [
        (1, "atomic", "hold", "committed")
    ]
    assert at_checkpoint.next_step == "step 2 (effect charge)"
    worker = Worker(FLOWS, store=store, queue=queue, clock=clock)
    DOWN[0] = 2
    worker.handle(queue.receive()[0])  # the charge fails: retried later, counted in the record
    retrying = show(store, FLOWS, "show-booking", space)
    assert retrying.next_step == "step 2 (effect charge), attempt 2"
    assert retrying.to_json()["retrying"]["err"] == "ConnectionError: provider down"  # type: ignore[index]

    def confirming() -> bool:  # on DynamoDB its wait keeps a keep-alive timer queued
        return "confirm" in (show(store, FLOWS, "show-booking", space).waits_for or "")

    deliver_all(worker, queue, clock, settled=confirming)
    before = everything(store)
    waiting = show(store, FLOWS, "show-booking", space)
    assert everything(store) == before  # showing never writes
    assert [(s.number, s.kind, s.outcome) for s in waiting.steps] == [
        (1, "atomic", "committed"),
        (2, "effect", "committed"),
    ]
    assert waiting.steps[1].value == {"charge": waiting.steps[1].value["charge"]}  # type: ignore[index]
    assert all(step.at is not None for step in waiting.steps)
    assert waiting.waits_for is not None and "confirm" in waiting.waits_for
    assert waiting.record.status is RunStatus.RUNNING
    send_message(store, booking, space, "confirm", "yes", key="c-1", queue=queue)
    deliver_all(worker, queue, clock)
    finished = show(store, FLOWS, "show-booking", space)
    assert finished.record.status is RunStatus.COMPLETED
    # its input is gone with the outcome: every step read from the store, the atomic's too
    assert [(s.number, s.kind, s.name, s.table) for s in finished.steps] == [
        (1, "atomic", "hold", "tablea"),
        (2, "effect", "charge", "idemflowruns"),
        (3, "receive", "confirm", "idemflowruns"),
    ]
    assert finished.steps[1].value == waiting.steps[1].value and finished.next_step is None
    assert finished.notes == ()


def refuse(tx: Any) -> None:
    raise ValueError("no stock")


@workflow("show-reserve")
def reserving(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["space"] + "seats", lambda tx: tx.increment("held"), name="hold")
    yield checkpoint()
    yield atomic("tablea", req["space"] + "stock", refuse, name="reserve")


def test_a_failed_request_names_the_step_it_failed_at(store: Store) -> None:
    """Where the failure's step is shown (``runs show``, ``admin.show``, the console's JSON, the
    error a caller gets), it is named with its kind, not just numbered."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    pending = submit(reserving({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(
        Worker([reserving], store=store, queue=queue, clock=clock, step_retry=StepRetry(maximum_attempts=1)),
        queue,
        clock,
    )
    failed = show(store, [reserving], "show-reserve", space)
    assert failed.record.status is RunStatus.FAILED
    assert failed.to_json()["failure"] == {
        "reason": "ValueError: no stock",
        "step": 2,
        "attempts": 1,
        "identity": "atomic reserve",
    }
    lines = failed.lines()
    assert "  failed at step 2 (atomic reserve) after 1 attempt(s): ValueError: no stock" in lines
    assert not any("waits for" in line for line in lines)  # a failed request waits for nothing
    with pytest.raises(RequestFailedError, match=r"failed at step 2 \(atomic reserve\) after 1 attempt"):
        pending.result(timeout=0)


def test_the_cli_shows_a_request_as_text_and_json(tmp_path: Path) -> None:
    module = tmp_path / "show_flows.py"
    root = str(Path(__file__).resolve().parents[2])
    module.write_text(
        f"import sys\nsys.path.insert(0, {root!r})\nfrom tests.operator.test_timeline import FLOWS\n"
    )
    path = tmp_path / "show.sqlite3"
    store = SqliteStore(path)
    submit(booking({"space": "s"}), request_id="b-1", store=store, queue=MemoryQueue())
    store.close()
    args = [
        "runs",
        "show",
        "--store",
        f"sqlite:{path}",
        "--workflows",
        "show_flows:FLOWS",
        "show-booking",
        "b-1",
    ]
    text = idemflow(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "show-booking v1 b-1: running" in text.stdout and "atomic" in text.stdout
    assert "at: step 2 (effect charge)" in text.stdout
    shown = json.loads(idemflow(*args, "--json", cwd=tmp_path).stdout)
    assert shown["status"] == "running" and shown["steps"][0]["name"] == "hold"
    # without --workflows: read from the store, where the checkpoint named the step's place
    bare = [arg for arg in args if arg not in ("--workflows", "show_flows:FLOWS")]
    text = idemflow(*bare, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("    1  ")]
    assert line.split()[1:5] == ["atomic", "hold", "tablea/sseats", "committed"]
    assert "note" not in text.stdout
    assert json.loads(idemflow(*bare, "--json", cwd=tmp_path).stdout)["steps"] == shown["steps"]


@workflow("show-publisher")
def show_publisher(n: int) -> Generator[Idem[Any], Any, Any]:
    yield set_event("stage", "accepted")
    for i in range(n):
        yield write_stream("log", i)
    yield checkpoint()
    yield close_stream("log")


def test_show_lists_what_a_running_request_published(store: Store) -> None:
    """Its events with their values, its streams with their length and whether they are closed,
    beside its steps, from the blocking and the asyncio call alike."""
    space = new_space()
    submit(show_publisher(2), request_id=space, store=store, queue=MemoryQueue())
    view = show(store, [show_publisher], "show-publisher", space)
    assert [(s.number, s.kind, s.name, s.value) for s in view.steps] == [
        (1, "set_event", "stage", None),
        (2, "write_stream", "log", 0),
        (3, "write_stream", "log", 1),
    ]
    assert [(e.key, e.value, e.step) for e in view.events] == [("stage", "accepted", 1)]
    assert [(s.key, s.length, s.closed) for s in view.streams] == [("log", 2, False)]
    assert '  event  stage = "accepted" (step 1)' in view.lines()
    assert "  stream log: 2 value(s), open" in view.lines()
    shown = view.to_json()
    assert shown["streams"] == [{"key": "log", "length": 2, "closed": False, "closed_at_step": None}]
    awaited = asyncio.run(ashow(store, [show_publisher], "show-publisher", space))
    assert (awaited.events, awaited.streams) == (view.events, view.streams)
