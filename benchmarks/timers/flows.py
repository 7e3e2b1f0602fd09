"""The workflows :mod:`benchmarks.timers` measures, and where each backend's store and queue are.

Importable by an ``idemflow worker benchmarks.timers.flows:WORKFLOWS`` process (run from the
repository root), so it imports nothing but idemflow.

- ``bench-nap``: ``sleep(seconds)`` (or ``sleep_until(at)``), then one step whose body records
  the wall clock when it runs (its row and its result): that time minus the sleep's memoized
  due time is the timer's lateness.
- ``bench-busy``: a request that never sleeps (a checkpoint, then one step): the background load.
- ``bench-base``, ``bench-plain``, ``bench-sleep``, ``bench-parent`` (+ ``bench-kid``),
  ``bench-inbox`` and ``bench-sender``: one step, then nothing, a plain step, ``sleep(1)``,
  ``start`` + ``wait``, ``receive`` / ``send``, whose backend calls are counted against
  ``bench-base``'s.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from typing import Any
from urllib.parse import quote

from idemflow import Idem, Tx, atomic, checkpoint, receive, send, sleep, sleep_until, start, wait, workflow
from idemflow.keys import RUNS_TABLE, memo_key, step_tag
from idemflow.stores.base import RowRef, Store

TABLE = "timers"
TOPIC = "note"
Flow = Generator[Idem[Any], Any, Any]


def _woke(tx: Tx) -> float:
    """The wall clock when the step after the sleep runs (the committed attempt's)."""
    woke = time.time()
    tx.put("woke", woke)
    return woke


def _mark(tx: Tx, what: str) -> str:
    tx.put(what, what)
    return what


@workflow("bench-nap")
def nap(req: dict[str, Any]) -> Flow:
    """Sleep, then record when the next step ran; returns that time."""
    if "at" in req:
        yield sleep_until(req["at"])
    else:
        yield sleep(req["seconds"])
    return (yield atomic(TABLE, req["id"], _woke, name="woke"))


@workflow("bench-busy")
def busy(req: dict[str, Any]) -> Flow:
    """Background load: answered at the checkpoint, finished by a worker, never sleeping."""
    yield checkpoint()
    return (yield atomic(TABLE, req["id"], lambda tx: _mark(tx, "busy"), name="busy"))


def _first(req: dict[str, Any]) -> Idem[Any]:
    return atomic(TABLE, req["id"], lambda tx: _mark(tx, "first"), name="first")


@workflow("bench-base")
def base(req: dict[str, Any]) -> Flow:
    """One step: what every counted workflow does besides the operation it measures."""
    return (yield _first(req))


@workflow("bench-plain")
def plain(req: dict[str, Any]) -> Flow:
    yield _first(req)
    return (yield atomic(TABLE, req["id"], lambda tx: _mark(tx, "second"), name="second"))


@workflow("bench-sleep")
def short_sleep(req: dict[str, Any]) -> Flow:
    yield _first(req)
    yield sleep(1)
    return "slept"


@workflow("bench-kid")
def kid(req: dict[str, Any]) -> Flow:
    """A child with no step of its own: its cost is that of being a request."""
    return req["id"]
    yield  # a generator


@workflow("bench-parent")
def parent(req: dict[str, Any]) -> Flow:
    yield _first(req)
    child = yield start(kid({"id": req["id"] + "k"}), request_id=req["id"] + "k")
    return (yield wait(child))


@workflow("bench-inbox")
def inbox(req: dict[str, Any]) -> Flow:
    yield _first(req)
    return (yield receive(TOPIC))


@workflow("bench-sender")
def sender(req: dict[str, Any]) -> Flow:
    yield _first(req)
    yield send(inbox, req["to"], TOPIC, {"from": req["id"]})
    return "sent"


WORKFLOWS = [nap, busy, base, plain, short_sleep, kid, parent, inbox, sender]


def due_of(store: Store, request_id: str) -> float | None:
    """A ``bench-nap`` request's due time: the memo of its first step (the sleep), or None."""
    row = store.read(RowRef(RUNS_TABLE, request_id, memo_key(nap.name, request_id, step_tag(1))))
    value = None if row is None else row.value
    due = value.get("v") if isinstance(value, dict) and value.get("id") == "sleep" else None
    return float(due) if isinstance(due, (int, float)) else None


# -- backends: the store and queue URLs worker processes open -------------------------------------

KINDS = ("sqlite", "moto", "azurite")


@contextlib.contextmanager
def backend_spec(kind: str) -> Iterator[dict[str, str]]:
    """Start what ``kind`` needs (a folder; moto servers for DynamoDB and for SQS, apart since moto
    serves one call at a time; Azurite) and yield what URLs need to reach it."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="idemflow-bench-timers-") as folder:
            yield {"kind": kind, "folder": folder}
    elif kind == "moto":
        from idemflow.testing.servers import moto_server

        with moto_server() as dynamodb, threaded_moto() as sqs:
            yield {"kind": kind, "dynamodb": dynamodb.endpoint, "sqs": sqs, "region": dynamodb.region}
    elif kind == "azurite":
        from idemflow.testing.servers import azurite_server

        with azurite_server() as azurite:
            yield {"kind": kind, "connection_string": azurite.connection_string}
    else:
        raise ValueError(f"unknown backend {kind!r}; one of {KINDS}")


@contextlib.contextmanager
def threaded_moto() -> Iterator[str]:
    """A moto server for SQS alone, serving calls concurrently (as SQS does): the suite's moto
    server serves one call at a time (DynamoDB's isolation), so every worker's one-second long
    poll on an empty queue would hold back every send behind it."""
    from idemflow.testing.servers import free_port, stop_process, wait_for_port

    port = free_port()
    code = (
        "from werkzeug.serving import run_simple;"
        "from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app;"
        f"run_simple('127.0.0.1', {port}, DomainDispatcherApplication(create_backend_app), threaded=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc, "moto server (SQS)")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, 10)


def store_url(spec: dict[str, str], tag: str) -> str:
    kind = spec["kind"]
    if kind == "sqlite":
        return f"sqlite:{spec['folder']}/{tag}.sqlite3"
    if kind == "moto":
        return f"dynamodb:?endpoint={spec['dynamodb']}&region={spec['region']}&prefix={tag}"
    return f"azure:?connection_string={quote(spec['connection_string'], safe='')}&prefix={tag}"


def queue_url(spec: dict[str, str], tag: str, visibility_timeout: float) -> str:
    kind, vt = spec["kind"], f"visibility_timeout={visibility_timeout:g}"
    if kind == "sqlite":
        return f"sqlite:{spec['folder']}/{tag}-queue.sqlite3?name=q&{vt}"
    if kind == "moto":
        return f"sqs:{tag}?endpoint={spec['sqs']}&region={spec['region']}&{vt}"
    return f"azure-queue:{tag}?connection_string={quote(spec['connection_string'], safe='')}&{vt}"
