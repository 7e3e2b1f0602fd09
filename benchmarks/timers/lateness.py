"""Timer lateness in real time: worker processes, a load generator, SIGKILLs at the due times.

:class:`Fleet` runs ``idemflow worker benchmarks.timers.flows:WORKFLOWS`` processes (the CLI
users run) and reads their JSON log lines as they come, noting which requests finished (to know
when a scenario is over, and when to kill). :func:`under_load` and :func:`killed` are the two
scenarios of :mod:`benchmarks.timers`; each returns a :class:`Lateness` per timer, read from the
store once it is over: the sleep's due time (its memo), when the step after the sleep ran (the
time its body recorded) and when the request finished (its run record's ``finished_at``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.timers.flows import TABLE, busy, due_of, nap, queue_url, store_url
from idemflow import Idem, open_store
from idemflow.client import status, submit
from idemflow.operator.commands import known_run
from idemflow.stores.base import Store
from idemflow.worker import Queue, open_queue

ROOT = Path(__file__).resolve().parents[2]
SPEC = "benchmarks.timers.flows:WORKFLOWS"


@dataclass(frozen=True)
class Lateness:
    """One timer: its due time, when the step after it ran, when its request finished (epoch s)."""

    request_id: str
    due: float
    ran: float
    finished: float
    batch: int = 0
    delivery: int = 0
    """Which delivery of its last message the worker that finished it held (from its log line;
    0 if none was read): 2 or more after a worker killed while holding it."""

    @property
    def late(self) -> float:
        return self.ran - self.due

    @property
    def finished_late(self) -> float:
        return self.finished - self.due


@dataclass
class Outcome:
    """What one scenario measured on one backend."""

    timers: list[Lateness]
    background: int = 0
    background_done: int = 0
    failed_submits: int = 0
    background_seconds: list[float] = field(default_factory=list)
    """Of each background request: from the call to ``submit`` to its outcome (by a worker)."""
    load: float = field(default_factory=lambda: os.getloadavg()[0])
    """The machine's 1-minute load average when the scenario ended (2 cores, shared)."""
    kills: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


@contextlib.contextmanager
def library_snapshot() -> Iterator[tuple[Path, str]]:
    """A folder holding a copy of the work tree's ``idemflow/`` and the workers' workflows, and a
    digest of the copy: worker processes started in it (restarted ones too) import this copy, so
    edits made to the work tree while the benchmark runs never mix in."""
    with tempfile.TemporaryDirectory(prefix="idemflow-timers-") as folder:
        where = Path(folder)
        shutil.copytree(ROOT / "idemflow", where / "idemflow", ignore=shutil.ignore_patterns("__pycache__"))
        (where / "benchmarks" / "timers").mkdir(parents=True)
        (where / "benchmarks" / "__init__.py").write_text("")
        (where / "benchmarks" / "timers" / "__init__.py").write_text("")  # the flows alone, not the benchmark
        shutil.copy(ROOT / "benchmarks" / "timers" / "flows.py", where / "benchmarks" / "timers" / "flows.py")
        digest = hashlib.sha256()
        for path in sorted((where / "idemflow").rglob("*.py")):
            digest.update(path.relative_to(where).as_posix().encode() + b"\0" + path.read_bytes())
        yield where, digest.hexdigest()[:12]


class Fleet:
    """``count`` worker processes, killed and restarted on demand; their finished events by request.

    They run in ``cwd`` (a :func:`library_snapshot`), whose ``idemflow`` they import: the CLI puts
    the working directory first on ``sys.path``, before the editable install's finder."""

    def __init__(self, store: str, queue: str, count: int, concurrency: int, cwd: Path = ROOT) -> None:
        self.argv = [sys.executable, "-m", "idemflow.cli", "worker", SPEC, "--store", store]
        self.argv += ["--queue", queue, "--concurrency", str(concurrency), "--relay-every", "5"]
        self.count = count
        self.cwd = cwd
        self.procs: list[subprocess.Popen[str]] = []
        self.finished: dict[str, float] = {}
        self.deliveries: dict[str, int] = {}
        self.other: deque[str] = deque(maxlen=40)
        self.changed = threading.Condition()

    def start(self) -> None:
        for _ in range(self.count):
            proc = subprocess.Popen(
                self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert proc.stderr is not None
            threading.Thread(target=self._read, args=(proc.stderr,), daemon=True).start()
            self.procs.append(proc)

    def _read(self, lines: IO[str]) -> None:
        for line in lines:
            try:
                found = json.loads(line)
            except ValueError:
                found = None
            if not isinstance(found, dict):
                if " finished (" not in line:  # the progress lines every 5 s
                    self.other.append(line.rstrip())
                continue
            if found.get("event") == "finished" and found.get("outcome") != "suspended":
                # completed, aborted, or a duplicate: a worker killed after writing the outcome and
                # before its ack leaves the message to another, which finds the request finished
                with self.changed:
                    request_id = str(found.get("request_id"))
                    self.finished.setdefault(request_id, time.time())
                    self.deliveries.setdefault(request_id, int(found.get("attempt") or 0))
                    self.changed.notify_all()
            elif found.get("event") not in ("finished", None):
                self.other.append(line.rstrip())

    def kill(self) -> None:
        """SIGKILL every worker process now (what they hold comes back after the visibility timeout)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait()
        self.procs.clear()

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def wait_any(self, ids: Iterable[str], deadline: float) -> bool:
        """Block until one of ``ids`` finished (or the wall clock reaches ``deadline``)."""
        wanted = set(ids)
        with self.changed:
            while not wanted & self.finished.keys():
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
        return True

    def wait_all(self, ids: Iterable[str], deadline: float) -> list[str]:
        """Block until every one of ``ids`` finished or ``deadline``; those still missing."""
        wanted = set(ids)
        with self.changed:
            while wanted - self.finished.keys() and time.time() < deadline:
                self.changed.wait(0.5)
            return sorted(wanted - self.finished.keys())

    def settled(self, store: Store, ids: dict[str, str], deadline: float) -> list[str]:
        """Block until every request of ``ids`` (request id -> workflow) finished or ``deadline``;
        those still missing. A request no log line reported is looked up in the store every few
        seconds: a worker killed between its ack and its log line leaves none."""
        while True:
            missing = self.wait_all(ids, min(deadline, time.time() + 5.0))
            for request_id in missing:
                if status(store, ids[request_id], request_id).status.final:
                    with self.changed:
                        self.finished.setdefault(request_id, time.time())
            missing = [request_id for request_id in missing if request_id not in self.finished]
            if not missing or time.time() >= deadline:
                return missing

    def failure(self, what: str) -> RuntimeError:
        return RuntimeError(f"{what}; the workers' last other log lines:\n" + "\n".join(self.other))


@contextlib.contextmanager
def fleet(store: str, queue: str, count: int, concurrency: int, cwd: Path) -> Iterator[Fleet]:
    workers = Fleet(store, queue, count, concurrency, cwd)
    try:
        workers.start()
        yield workers
    finally:
        workers.stop()


def _open(spec: dict[str, str], tag: str, visibility_timeout: float) -> tuple[str, str, Store, Queue]:
    surl, qurl = store_url(spec, tag), queue_url(spec, tag, visibility_timeout)
    store = open_store(surl)
    store.create_tables(TABLE)
    return surl, qurl, store, open_queue(qurl)


def _submit_all(
    store: Store, queue: Queue, plan: Sequence[tuple[float, Idem[Any], str]], threads: int
) -> tuple[int, dict[str, float]]:
    """Submit each planned request at its time (a pool of ``threads`` clients): how many submits
    failed, and when each request's ``submit`` was called."""
    failed = [0]
    called: dict[str, float] = {}

    def one(item: tuple[float, Idem[Any], str]) -> None:
        at, m, request_id = item
        time.sleep(max(at - time.time(), 0.0))
        called[request_id] = time.time()
        try:
            submit(m, request_id=request_id, store=store, queue=queue)
        except Exception:  # noqa: BLE001 - counted and reported: a load generator goes on
            failed[0] += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, sorted(plan, key=lambda item: item[0])))
    store.flush()
    return failed[0], called


def _collect(store: Store, workers: Fleet, ids: dict[str, int]) -> list[Lateness]:
    """Each timer's due time (its memo), when its next step ran (its result) and when the request
    finished (its run record's ``finished_at``, the worker's clock)."""
    found = []
    for request_id, batch in ids.items():
        due, done = due_of(store, request_id), known_run(store, nap.name, request_id)
        if due is None or not isinstance(done.result, (int, float)) or done.finished_at is None:
            raise workers.failure(
                f"timer {request_id}: due {due}, status {done.status}, result {done.result}"
            )
        ran, end = float(done.result), float(done.finished_at)
        found.append(Lateness(request_id, due, ran, end, batch, workers.deliveries.get(request_id, 0)))
    return found


def under_load(
    spec: dict[str, str],
    tag: str,
    *,
    requests: int,
    window: float,
    sleeps: tuple[float, float],
    background_rate: float,
    workers: int,
    concurrency: int,
    visibility_timeout: float,
    cwd: Path = ROOT,
    clients: int = 4,
    seed: int = 7,
) -> Outcome:
    """``requests`` timers submitted evenly over ``window`` seconds, each sleeping a random
    ``sleeps`` seconds, while ``background_rate`` requests/s that never sleep keep the workers busy."""
    began = time.time()
    surl, qurl, store, queue = _open(spec, tag, visibility_timeout)
    rng = random.Random(seed)
    try:
        with fleet(surl, qurl, workers, concurrency, cwd) as fleet_:
            t0 = time.time() + 2.0  # the workers start meanwhile
            plan: list[tuple[float, Idem[Any], str]] = []
            naps = {f"n{i}": 0 for i in range(requests)}
            for i, request_id in enumerate(naps):
                seconds = round(rng.uniform(*sleeps), 3)
                plan.append(
                    (t0 + i * window / requests, nap({"id": request_id, "seconds": seconds}), request_id)
                )
            spread = window + sleeps[1]
            chatter = [f"b{j}" for j in range(int(background_rate * spread))]
            for j, request_id in enumerate(chatter):
                plan.append((t0 + j / background_rate, busy({"id": request_id}), request_id))
            failed, called = _submit_all(store, queue, plan, clients)
            named = {**{n: nap.name for n in naps}, **{b: busy.name for b in chatter}}
            missing = fleet_.settled(store, named, t0 + spread + 120.0)
            if set(missing) & naps.keys():
                raise fleet_.failure(f"{len(missing)} requests never finished, e.g. {missing[:5]}")
            timers = _collect(store, fleet_, naps)
            ends = []
            for request_id in set(chatter) - set(missing):
                finished = known_run(store, busy.name, request_id).finished_at
                if finished is not None:
                    ends.append(finished - called[request_id])
        return Outcome(
            timers, len(chatter), len(chatter) - len(missing), failed, ends, seconds=time.time() - began
        )
    finally:
        queue.close()
        store.close()


def killed(
    spec: dict[str, str],
    tag: str,
    *,
    batches: int,
    per_batch: int,
    workers: int,
    concurrency: int,
    visibility_timeout: float,
    lead: float,
    cwd: Path = ROOT,
    clients: int = 4,
) -> Outcome:
    """Batches of ``per_batch`` timers due at one instant each (``sleep_until``); at each instant,
    as soon as a worker finished the first timer of the batch, every worker process is SIGKILLed
    and new ones started. Batches are ``visibility_timeout + 4`` s apart (the first ``lead`` s
    from the start, each submitted once the previous kill is done), so a message a killed worker
    held comes back before the next kill."""
    began = time.time()
    surl, qurl, store, queue = _open(spec, tag, visibility_timeout)
    gap = visibility_timeout + 4.0
    try:
        with fleet(surl, qurl, workers, concurrency, cwd) as fleet_:
            first = time.time() + lead
            ids: dict[str, int] = {}
            kills, failed = [], 0
            for b in range(batches):  # each batch submitted after the previous kill, due gap s later
                due = first + b * gap
                batch = {f"k{b}-{i}": b for i in range(per_batch)}
                ids.update(batch)
                plan = [(0.0, nap({"id": request_id, "at": due}), request_id) for request_id in batch]
                failed += _submit_all(store, queue, plan, clients)[0]
                if time.time() > due:
                    raise RuntimeError(
                        f"submitting batch {b} took until past its due time: raise --kill-lead"
                    )
                time.sleep(max(due - time.time(), 0.0))
                seen = fleet_.wait_any(batch, due + 5.0)
                at = time.time()
                fleet_.kill()
                done = sum(1 for request_id in batch if request_id in fleet_.finished)
                fleet_.start()
                kills.append(
                    {"batch": b, "after_due": at - due, "finished_before": done, "seen": float(seen)}
                )
            deadline = first + batches * gap + 3 * visibility_timeout + 60.0
            missing = fleet_.settled(store, dict.fromkeys(ids, nap.name), deadline)
            if missing:
                raise fleet_.failure(f"{len(missing)} timers never finished, e.g. {missing[:5]}")
            timers = _collect(store, fleet_, ids)
        return Outcome(timers, failed_submits=failed, kills=kills, seconds=time.time() - began)
    finally:
        queue.close()
        store.close()
