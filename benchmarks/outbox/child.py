"""The workload :mod:`benchmarks.outbox` runs in a subprocess, once per idemflow version.

Started by the parent with the idemflow to measure first on ``sys.path``
(the previous release extracted from git, or the work tree); it opens one
store and one queue on fresh tables of the backend it is given, then answers
the parent's commands, one JSON line each way on stdin/stdout:

- ``{"op": "warmup", "n": N}``: N submits and their worker, untimed;
- ``{"op": "round", "n": N, "settle": false}``: N submits back to back, each
  timed, then the store's background writes flushed (untimed; ``settle``:
  after each submit), then a worker finishes the N requests (untimed);
  answers the latencies and what each part cost;
- ``{"op": "relay", "n": N}``: N passes of the outbox relay over an empty
  outbox (``null`` for a version without one);
- ``{"op": "close"}``.

The workload is ``tests.support.async_workflows.survey`` with a checkpoint after its
first step (``at=[1]``), copied here: ``submit`` runs step 1 (a put in
``tablea``) and returns at the checkpoint; the worker runs step 2 (an
increment in ``tableb``).

Counted per phase: backend calls (the store's own count, read through
:func:`~benchmarks.common.counting.backend_calls`, which includes e.g. the Azure
store's reads behind an increment, and its cache writes), the store API calls
seen by a :class:`~benchmarks.common.counting.CountingStore` (reads, commits,
``commit_cache`` writes, partition scans), rows and logical bytes written, and
queue sends with their body bytes.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from idemflow import Idem, Tx, atomic, workflow
from idemflow.async_worklist.worker import Worker  # this path is the same in both versions compared

try:  # 1.0's paths; this child also runs on the revision it is compared with
    from idemflow import checkpoint
    from idemflow.client import submit
except ImportError:  # a revision before 1.0
    from idemflow.async_worklist.submit import checkpoint, submit  # type: ignore[import-not-found,no-redef]

TABLES = ("tablea", "tableb")
ANSWERS = ("yes", "no", "maybe")
DRAIN_TIMEOUT = 120.0


def _record(tx: Tx, response: dict[str, Any]) -> str:
    tx.put(response["user"], response["answer"])
    return str(response["answer"])


def _count(tx: Tx, answer: str) -> str:
    tx.increment(answer)
    return answer


@workflow("survey")
def survey(response: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Record a response, checkpoint, count it in another table (``tests.support.async_workflows.survey``,
    ``at=[1]``)."""
    space = response["space"]
    answer = yield atomic("tablea", space + "responses", lambda tx: _record(tx, response), name="record")
    yield checkpoint()
    count = yield atomic("tableb", space + "summary", lambda tx: _count(tx, answer), name="count")
    return {"counted": count}


def request(i: int) -> dict[str, Any]:
    """The survey response of request ``i``: a new respondent each time, checkpoint after step 1."""
    return {"space": "s", "user": f"u{i}", "answer": ANSWERS[i % len(ANSWERS)], "at": [1]}


def main(argv: Sequence[str], out: IO[str]) -> None:
    root, spec = Path(argv[0]).resolve(), json.loads(argv[2])  # argv[1]: the repository, on sys.path
    import idemflow

    where = Path(idemflow.__file__).resolve()
    if root not in where.parents:  # an editable install's finder must not win over sys.path
        raise SystemExit(f"idemflow imported from {where}, not from {root}")
    session = Session(spec)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "close":
                break
            if op == "warmup":
                session.submits(int(command["n"]))
                session.drain(int(command["n"]))
                answer: Any = {"ok": True}
            elif op == "round":
                answer = session.round(int(command["n"]), bool(command.get("settle")))
            elif op == "relay":
                answer = session.relay(int(command["n"]))
            else:
                raise SystemExit(f"unknown command {op!r}")
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        session.close()


class Session:
    """One store, one queue, the counting wrappers around them and a request counter."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from benchmarks.common.counting import CountingStore
        from idemflow.stores.base import CommitOutcome, Op, Row, Store

        class Counting(CountingStore):
            """A :class:`CountingStore` that also counts partition scans (the outbox relay's reads)."""

            scans = 0
            commit_seconds = 0.0

            def scan(self, table: str, partition: str | None = None) -> Iterator[tuple[str, str, Row]]:
                self.scans += 1
                return self.inner.scan(table, partition)

            cache_seconds = 0.0

            def commit(self, ops: Sequence[Op]) -> CommitOutcome:
                start = time.perf_counter()
                try:
                    return super().commit(ops)
                finally:
                    self.commit_seconds += time.perf_counter() - start

            def commit_cache(self, ops: Sequence[Op]) -> None:
                start = time.perf_counter()  # the caller's part: the write itself on SQLite
                try:
                    super().commit_cache(ops)
                finally:
                    self.cache_seconds += time.perf_counter() - start

        self.inner: Store = open_store(spec)
        self.queue = open_queue(spec)
        self.client = Counting(self.inner)
        self.worker_store = Counting(self.inner)
        self.sends = 0
        self.send_seconds = 0.0
        self.send_bytes: list[int] = []
        send = self.queue.send

        def counting_send(body: str, **kwargs: Any) -> None:
            self.sends += 1
            self.send_bytes.append(len(body.encode("utf-8")))
            start = time.perf_counter()
            try:
                send(body, **kwargs)
            finally:
                self.send_seconds += time.perf_counter() - start

        setattr(self.queue, "send", counting_send)  # noqa: B010 - this instance only
        self.counter = iter(range(10**9))

    def submits(self, n: int, settle: bool = False) -> list[float]:
        """``n`` submits back to back, each timed; ``settle``: each one's background writes are
        awaited after it, untimed, so none overlaps the next submit."""
        latencies = []
        for _ in range(n):
            i = next(self.counter)
            start = time.perf_counter()
            submit(survey(request(i)), request_id=f"r{i}", store=self.client, queue=self.queue)
            latencies.append(time.perf_counter() - start)
            if settle:
                self.inner.flush()
        self.inner.flush()  # the background writes of these submits, before anything else runs
        return latencies

    def drain(self, n: int) -> None:
        """A worker finishes ``n`` submitted requests (its own thread, stopped once they are done)."""
        options: dict[str, Any] = {"concurrency": 1, "wait": 0.1}
        if "relay_every" in inspect.signature(Worker).parameters:
            options["relay_every"] = None  # its cost is measured apart (``relay``), per pass
        worker = Worker([survey], store=self.worker_store, queue=self.queue, **options)
        thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
        thread.start()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        try:
            while worker.stats.finished + worker.stats.dead_lettered < n:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise RuntimeError(f"the worker finished {worker.stats.finished} of {n} requests")
                time.sleep(0.002)
            if worker.stats.dead_lettered:
                raise RuntimeError(f"{worker.stats.dead_lettered} requests dead-lettered")
        finally:
            worker.stop()
            thread.join()
        self.inner.flush()

    def round(self, n: int, settle: bool) -> dict[str, Any]:
        """``n`` timed submits, then their worker; the latencies and the counts of both parts."""
        before = self._snapshot()
        latencies = self.submits(n, settle)
        middle = self._snapshot()
        self.drain(n)
        after = self._snapshot()
        return {
            "latencies": latencies,
            "client": _delta(before, middle, "client"),
            "worker": _delta(middle, after, "worker"),
            "message_bytes": statistics.median(self.send_bytes[-n:]) if n else 0,
        }

    def relay(self, n: int) -> dict[str, Any] | None:
        """``n`` passes of the outbox relay over an empty outbox: calls and seconds per pass."""
        try:
            from idemflow.async_worklist.outbox import relay  # in both versions compared
        except ImportError:
            return None
        before = self._snapshot()
        times = []
        for _ in range(n):
            start = time.perf_counter()
            relay(self.worker_store, self.queue)
            times.append(time.perf_counter() - start)
        self.inner.flush()
        return {"seconds": statistics.median(times), "per_pass": _delta(before, self._snapshot(), "worker")}

    def _snapshot(self) -> dict[str, dict[str, float]]:
        from benchmarks.common.counting import backend_calls

        parts: dict[str, dict[str, float]] = {}
        for name, store in (("client", self.client), ("worker", self.worker_store)):
            tally = store.tally
            parts[name] = {
                "reads": tally.reads,
                "commits": tally.commits,
                "cache_writes": tally.cache_writes,
                "scans": store.scans,
                "rows": tally.rows_written,
                "bytes": tally.bytes_written,
                "cache_bytes": tally.cache_bytes,
                "commit_seconds": store.commit_seconds,
                "cache_seconds": store.cache_seconds,
            }
        parts["backend"] = {
            "round_trips": backend_calls(self.inner),
            "sends": self.sends,
            "send_seconds": self.send_seconds,
        }
        return parts

    def close(self) -> None:
        self.queue.close()
        self.inner.close()


def _delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], part: str
) -> dict[str, float]:
    """What ``part`` (client or worker) did between two snapshots, with the backend's totals."""
    found = {key: after[part][key] - before[part][key] for key in after[part]}
    for key in after["backend"]:
        found[key] = after["backend"][key] - before["backend"][key]
    return found


def open_store(spec: dict[str, Any]) -> Any:
    kind, tag = spec["kind"], spec["tag"]
    if kind == "sqlite":
        from benchmarks.common.backends import prewarm_sqlite
        from idemflow.stores import SqliteStore

        path = Path(spec["folder"]) / f"{tag}.sqlite3"
        prewarm_sqlite(path)
        return SqliteStore(path)
    if kind == "moto":
        from idemflow.stores.dynamodb import DynamoDBStore

        dynamodb = DynamoDBStore(endpoint_url=spec["dynamodb"], region_name=spec["region"], prefix=tag)
        dynamodb.create_tables(*TABLES)
        return dynamodb
    if kind == "azurite":
        from idemflow.stores.azure_tables import AzureTableStore

        azure = AzureTableStore(connection_string=spec["connection_string"], prefix=tag)
        azure.create_tables(*TABLES)
        return azure
    raise SystemExit(f"unknown backend {kind!r}")


def open_queue(spec: dict[str, Any]) -> Any:
    kind, tag = spec["kind"], spec["tag"]
    if kind == "sqlite":
        from benchmarks.common.backends import prewarm_sqlite
        from idemflow.async_worklist.queues.sqlite import SqliteQueue

        path = Path(spec["folder"]) / f"{tag}-queue.sqlite3"
        prewarm_sqlite(path)
        return SqliteQueue(path, visibility_timeout=60)
    if kind == "moto":
        from idemflow.async_worklist.queues.sqs import SqsQueue

        return SqsQueue(tag, endpoint_url=spec["sqs"], region_name=spec["region"], visibility_timeout=60)
    if kind == "azurite":
        from idemflow.async_worklist.queues.azure_queue import AzureQueue

        return AzureQueue(tag.lower(), connection_string=spec["connection_string"], visibility_timeout=60)
    raise SystemExit(f"unknown backend {kind!r}")


if __name__ == "__main__":
    protocol = sys.stdout
    sys.stdout = sys.stderr  # anything printed by the code measured must not reach the parent's pipe
    main(sys.argv[1:], protocol)
