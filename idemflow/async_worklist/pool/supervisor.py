"""The worker pool's supervisor: start, stop and replace worker processes as a policy says.

Why processes, not more threads: a worker process is the unit that already
stops gracefully (SIGTERM: stop receiving, finish or give back what it
holds) and that a crash takes down alone. The supervisor does only IO: every
``sample_every`` seconds it reads the queue's :class:`~idemflow.worker.QueueStats`,
asks the policy (:mod:`idemflow.async_worklist.pool.policy`) for a target, starts processes
up to it or SIGTERMs the youngest down to it, and starts a replacement for a
process that died without being asked (a SIGKILL, an OOM kill). Each change
is logged on ``idemflow.pool`` with its reason and, with ``status_path``,
written to a JSON file that tools and tests read.

A replacement for a process that died less than ``_SHORT_LIFE`` seconds
after it started waits, doubling up to a minute: a worker that cannot start
(a bad queue URL) does not become a fork loop.

A worker asked to stop gets ``stop_grace`` seconds to finish what it holds
(one long outside call can take minutes), then SIGKILL, logged with its pid
and the wait: a supervisor that waited for ever would be killed whole by its
container platform at the end of the platform's own grace, with no word on
which worker held on. A killed worker loses nothing: the messages it held
come back after their visibility timeout and the memos make the re-run exact.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from idemflow.async_worklist.pool.policy import PoolView, Scaling, ScalingPolicy
from idemflow.async_worklist.signals import stop_on_signals
from idemflow.core.backlog import QueueStats
from idemflow.errors import InvalidValueError

log = logging.getLogger("idemflow.pool")

POOL_WORKER_ENV = "IDEMFLOW_POOL_WORKER"
"""Set in every worker process the pool starts (to the supervisor's pid): such a process refuses
to start a pool of its own."""
_SHORT_LIFE = 10.0
_MAX_BACKOFF = 60.0
_KEPT_DECISIONS = 50
_KEPT_SAMPLES = 2000
STOP_GRACE = 30.0
"""Default seconds a worker asked to stop may take before SIGKILL (Kubernetes' own grace)."""
_SHUTDOWN_POLL = 0.05


@dataclass(slots=True)
class _Child:
    process: subprocess.Popen[bytes]
    started: float
    stopping: bool = False
    signalled: float | None = None
    """When it was sent SIGTERM (the pool's clock): its grace runs from then."""


@dataclass(slots=True)
class _Record:
    decisions: list[dict[str, Any]] = field(default_factory=list)
    replaced: int = 0
    stats: QueueStats | None = None


class Pool:
    """Keeps between ``minimum`` and ``maximum`` processes of ``command`` running.

    ``read_stats`` samples the queue; ``policy`` turns a :class:`PoolView`
    into a target; ``concurrency`` is each process's threads (for the view).
    ``clock`` is monotonic time, injectable like the rest of idemflow's.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        minimum: int,
        maximum: int,
        concurrency: int,
        read_stats: Callable[[], QueueStats],
        policy: ScalingPolicy,
        sample_every: float = 2.0,
        status_path: str | None = None,
        stop_grace: float = STOP_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_bounds(minimum, maximum)
        if not isinstance(sample_every, (int, float)) or not 0 < sample_every <= _MAX_BACKOFF:
            raise InvalidValueError("--scale-every", f"must be seconds > 0 and <= 60, not {sample_every!r}")
        self.stop_grace = check_stop_grace(stop_grace)
        self.command = list(command)
        self.minimum, self.maximum, self.concurrency = minimum, maximum, concurrency
        self.read_stats, self.policy = read_stats, policy
        self.sample_every = sample_every
        self.status_path = status_path
        self.clock = clock
        self.target = minimum
        self._children: list[_Child] = []
        self._samples: list[tuple[float, QueueStats]] = []
        self._last_change = clock()
        self._restart_at = 0.0
        self._backoff = 1.0
        self._record = _Record()
        self._policy_answered = False
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._signals: list[str] = []
        """The stop signals received, in order: told in the log by the main flow, never by the
        handler (a handler that writes a log line can land inside the main thread's own write,
        and a reentrant write into one stream raises there)."""

    def stop(self) -> None:
        """Stop sampling; :meth:`run` then SIGTERMs every worker and waits up to ``stop_grace``
        for them. Called again while they are stopping, it SIGKILLs them at once."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    def run(self) -> None:
        """Supervise until :meth:`stop` (SIGTERM/SIGINT when run in the main thread)."""
        restore = self._install_signal_handlers()
        log.info("pool: starting %d worker process(es) (at most %d)", self.minimum, self.maximum)
        try:
            while not self._stop.is_set():
                self.tick()
                self._stop.wait(self.sample_every)
        finally:
            if self._signals:
                name = self._signals[0]
                log.info("pool: %s: stopping (%s again kills the workers at once)", name, name)
            self._shutdown()
            restore()

    def tick(self) -> None:
        """One sample: reap the dead, read the queue, apply the policy, keep ``target`` running."""
        now = self.clock()
        self._reap(now)
        try:
            stats = self.read_stats()
        except Exception as exc:  # noqa: BLE001 - the pool keeps its size until the queue answers
            log.warning("pool: cannot read the queue's stats, keeping %d: %r", self.target, exc)
            stats = None
        if stats is not None:
            self._decide(now, stats)
        self._fill(now)
        self._write_status()

    def _decide(self, now: float, stats: QueueStats) -> None:
        self._record.stats = stats
        self._samples.append((now, stats))
        del self._samples[:-_KEPT_SAMPLES]
        view = PoolView(
            self.target,
            self.minimum,
            self.maximum,
            self.concurrency,
            now,
            self._last_change,
            tuple(self._samples),
        )
        try:
            answer = self.policy(view)
            if not _is_scaling(answer):
                raise InvalidValueError("scaling policy", f"must return a Scaling, not {answer!r}")
        except Exception as exc:
            if self._policy_answered:  # it worked before: keep the pool, try again next sample
                log.exception("pool: the scaling policy failed; keeping %d", self.target)
                return
            if isinstance(exc, InvalidValueError):  # its first answer: a wrong --scaling
                raise
            raise InvalidValueError("scaling policy", f"failed at its first sample: {exc!r}") from exc
        self._policy_answered = True
        target = view.clamp(answer.target)
        if target == self.target:
            return
        verb = "grow" if target > self.target else "shrink"
        log.info("pool: %s %d -> %d: %s", verb, self.target, target, answer.reason)
        decision = {"at": time.time(), "from": self.target, "to": target, "reason": answer.reason}
        self._record.decisions = [*self._record.decisions, decision][-_KEPT_DECISIONS:]
        self.target = target
        self._last_change = now
        self._samples = [(now, stats)]

    def _fill(self, now: float) -> None:
        running = [child for child in self._children if not child.stopping]
        for child in reversed(running[self.target :]):  # the youngest go first
            log.info("pool: stopping worker %d (SIGTERM: it finishes what it holds)", child.process.pid)
            self._terminate(child, now)
        missing = self.target - min(len(running), self.target)
        if missing and now >= self._restart_at:
            for _ in range(missing):
                self._start(now)

    def _start(self, now: float) -> None:
        env = {**os.environ, POOL_WORKER_ENV: str(os.getpid())}
        process = subprocess.Popen(self.command, env=env, preexec_fn=_end_with_parent)
        self._children.append(_Child(process, now))
        log.info("pool: started worker %d (%d of %d)", process.pid, self._running(), self.target)

    def _terminate(self, child: _Child, now: float) -> None:
        child.stopping = True
        if child.signalled is None and child.process.poll() is None:
            child.signalled = now
            child.process.send_signal(signal.SIGTERM)

    def _overdue(self, child: _Child, now: float) -> bool:
        """Its grace since SIGTERM has run out."""
        return child.signalled is not None and now - child.signalled >= self.stop_grace

    def _kill(self, child: _Child, now: float, why: str) -> None:
        """SIGKILL ``child`` if it still runs, logging its pid and how long it had."""
        if child.process.poll() is not None:
            return
        waited = 0.0 if child.signalled is None else now - child.signalled
        log.warning(
            "pool: worker %d still running %.1fs after SIGTERM (%s); SIGKILL: the messages it held "
            "come back after their visibility timeout",
            child.process.pid,
            waited,
            why,
        )
        child.process.kill()

    def _reap(self, now: float) -> None:
        for child in list(self._children):
            code = child.process.poll()
            if code is None:
                if self._overdue(child, now):
                    self._kill(child, now, f"--stop-grace {self.stop_grace:g}")
                continue
            self._children.remove(child)
            if child.stopping:
                log.info("pool: worker %d stopped (exit %d)", child.process.pid, code)
                continue
            self._record.replaced += 1
            lived = now - child.started
            log.warning(
                "pool: worker %d died (exit %d) after %.1fs; replacing it", child.process.pid, code, lived
            )
            if lived < _SHORT_LIFE:
                self._restart_at = now + self._backoff
                self._backoff = min(self._backoff * 2, _MAX_BACKOFF)
            else:
                self._backoff = 1.0

    def _running(self) -> int:
        return sum(1 for child in self._children if not child.stopping)

    def _shutdown(self) -> None:
        """SIGTERM every worker, wait for each until its grace ends (or :meth:`stop` is called
        again), SIGKILL those left."""
        log.info(
            "pool: stopping %d worker process(es) (SIGKILL after %gs)", len(self._children), self.stop_grace
        )
        now = self.clock()
        for child in self._children:
            self._terminate(child, now)
        self._write_status()
        while any(child.process.poll() is None for child in self._children):
            now = self.clock()
            hurry = self._hurry.is_set()
            if hurry and len(self._signals) > 1:
                log.info("pool: %s again: killing the workers still running", self._signals[-1])
            for child in self._children:
                if hurry:
                    self._kill(child, now, "asked to stop again")
                elif self._overdue(child, now):
                    self._kill(child, now, f"--stop-grace {self.stop_grace:g}")
            if hurry:
                break
            self._hurry.wait(_SHUTDOWN_POLL)
        for child in self._children:
            code = child.process.wait()  # SIGKILLed or exited: returns at once
            log.info("pool: worker %d stopped (exit %d)", child.process.pid, code)
        self._children.clear()
        self._write_status()

    def _write_status(self) -> None:
        if self.status_path is None:
            return
        stats = self._record.stats
        status = {
            "pid": os.getpid(),
            "target": self.target,
            "running": self._running(),
            "workers": [child.process.pid for child in self._children if not child.stopping],
            "stopping": [child.process.pid for child in self._children if child.stopping],
            "replaced": self._record.replaced,
            "stats": None if stats is None else stats.to_json(),
            "decisions": self._record.decisions,
        }
        partial = f"{self.status_path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as file:
            json.dump(status, file)
        os.replace(partial, self.status_path)

    def _install_signal_handlers(self) -> Callable[[], None]:
        def stopping(sig: signal.Signals) -> None:
            self._signals.append(sig.name)  # the main flow logs it
            self.stop()

        return stop_on_signals(stopping)


def _is_scaling(answer: object) -> bool:
    """A :class:`Scaling` with an int target (a bool is no count)."""
    target = getattr(answer, "target", None)
    return isinstance(answer, Scaling) and isinstance(target, int) and not isinstance(target, bool)


def _end_with_parent() -> None:
    """In the child, before it runs the worker: on Linux, SIGTERM it when the supervisor dies, so
    a SIGKILLed supervisor leaves no workers behind (elsewhere they run until stopped)."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def parse_processes(text: str) -> tuple[int, int]:
    """``MIN:MAX`` (or ``N``, a fixed size) as two ints, ``1 <= MIN <= MAX``, else an error.

    >>> parse_processes("1:4"), parse_processes("3")
    ((1, 4), (3, 3))
    >>> parse_processes("4:1")
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: --processes: must be MIN:MAX with 1 <= MIN <= MAX <= 256, not '4:1'
    """
    low, _, high = text.partition(":")
    try:
        minimum, maximum = int(low), int(high or low)
        check_bounds(minimum, maximum)
    except (ValueError, InvalidValueError):
        raise InvalidValueError(
            "--processes", f"must be MIN:MAX with 1 <= MIN <= MAX <= {MAX_PROCESSES}, not {text!r}"
        ) from None
    return minimum, maximum


MAX_PROCESSES = 256
"""The most worker processes one pool starts on one host."""


def check_stop_grace(seconds: object) -> float:
    """``seconds`` as a float if a finite number > 0, else an :class:`InvalidValueError`.

    >>> check_stop_grace(10)
    10.0
    >>> check_stop_grace(0)
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: --stop-grace: must be seconds > 0, not 0
    """
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if not number or not 0 < seconds < float("inf"):  # type: ignore[operator]
        raise InvalidValueError("--stop-grace", f"must be seconds > 0, not {seconds!r}")
    return float(seconds)  # type: ignore[arg-type]


def check_bounds(minimum: object, maximum: object) -> None:
    """``1 <= minimum <= maximum <= MAX_PROCESSES`` (ints), else an :class:`InvalidValueError`."""
    ints = all(isinstance(n, int) and not isinstance(n, bool) for n in (minimum, maximum))
    if not ints or not 1 <= minimum <= maximum <= MAX_PROCESSES:  # type: ignore[operator]
        raise InvalidValueError(
            "pool size", f"must be 1 <= minimum <= maximum <= {MAX_PROCESSES}, not {minimum!r}:{maximum!r}"
        )
