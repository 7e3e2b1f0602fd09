"""How many worker processes a pool wants: a pure function of what the queue shows.

Why pure and swappable: the supervisor (:mod:`idemflow.async_worklist.pool.supervisor`) does the IO
(sampling the queue, starting and stopping processes); the decision is a
function of a :class:`PoolView` alone, so it is tested with generated
readings instead of timed runs, and an application that knows its own load
(PLASMA's "programmable elasticity") passes its own callable instead of
:class:`BacklogPolicy` (``idemflow worker --scaling MODULE:ATTR``).

>>> from idemflow.worker import QueueStats
>>> busy = QueueStats("jobs", visible=30, delayed=0, in_flight=8, total=38)
>>> view = PoolView(size=1, minimum=1, maximum=4, concurrency=8, now=100.0, last_change=0.0,
...                 samples=((100.0, busy),))
>>> BacklogPolicy()(view)
Scaling(target=4, reason='backlog: 38 messages (30 visible, 8 in flight) want 5 worker(s) of 8 threads')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from idemflow.core.backlog import QueueStats
from idemflow.errors import InvalidValueError

__all__ = ["BacklogPolicy", "PoolView", "Scaling", "ScalingPolicy"]


@dataclass(frozen=True, slots=True)
class PoolView:
    """What a scaling policy sees at one sample.

    ``size`` is the number of worker processes the pool keeps (a dead one
    being replaced still counts); ``minimum``/``maximum`` its bounds;
    ``concurrency`` each process's threads (or tasks). ``now`` and
    ``last_change`` (when the pool last grew or shrank, else when it
    started) are monotonic seconds. ``samples`` holds ``(time, stats)``
    readings since the last change, oldest first, at least one.

    >>> idle = QueueStats("jobs", visible=0, delayed=0, in_flight=0, total=0)
    >>> PoolView(1, 1, 2, 4, 10.0, 0.0, ((10.0, idle),)).stats.total
    0
    """

    size: int
    minimum: int
    maximum: int
    concurrency: int
    now: float
    last_change: float
    samples: tuple[tuple[float, QueueStats], ...]

    @property
    def stats(self) -> QueueStats:
        """The latest reading."""
        return self.samples[-1][1]

    def clamp(self, target: int) -> int:
        """``target`` within ``[minimum, maximum]``."""
        return min(max(target, self.minimum), self.maximum)


@dataclass(frozen=True, slots=True)
class Scaling:
    """A policy's answer: keep ``target`` worker processes, because ``reason`` (logged)."""

    target: int
    reason: str


ScalingPolicy = Callable[[PoolView], Scaling]
"""Any callable from a :class:`PoolView` to a :class:`Scaling`; the pool clamps its target."""


@dataclass(frozen=True, slots=True)
class BacklogPolicy:
    """Grow at once to what the backlog needs; shrink only after ``cooldown`` quiet seconds.

    A process is wanted for every ``concurrency * per_thread`` messages
    visible or in flight (``per_thread=1``: one message per thread, none
    waiting). When the oldest visible message has waited more than ``lag``
    seconds the pool also grows by one (at most once per ``settle``
    seconds, so new processes get to start receiving first). It shrinks to
    the most that any sample of the last ``cooldown`` seconds wanted, and
    only once ``cooldown`` seconds passed since the last change, and never
    while the queue lags: a burst that pauses for a moment does not stop
    processes it will need again.

    >>> BacklogPolicy(per_thread=0)
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: per_thread: must be a number > 0, not 0
    """

    per_thread: float = 1.0
    lag: float | None = 10.0
    cooldown: float = 30.0
    settle: float = 5.0

    def __post_init__(self) -> None:
        _positive(self.per_thread, "per_thread")
        if self.lag is not None:
            _positive(self.lag, "lag")
        _positive(self.cooldown, "cooldown", zero=True)
        _positive(self.settle, "settle", zero=True)

    def wanted(self, stats: QueueStats, concurrency: int) -> int:
        """Processes the work in ``stats`` needs at ``per_thread`` messages per thread (unclamped).

        >>> BacklogPolicy().wanted(QueueStats("q", visible=9, delayed=0, in_flight=0, total=9), 4)
        3
        """
        return math.ceil(stats.work / (concurrency * self.per_thread))

    def __call__(self, view: PoolView) -> Scaling:
        stats = view.stats
        wanted = view.clamp(self.wanted(stats, view.concurrency))
        if wanted > view.size:
            return Scaling(wanted, f"backlog: {_described(stats)} want {self._count(stats, view)}")
        lagging = self.lag is not None and stats.lag is not None and stats.lag > self.lag
        settled = view.now - view.last_change >= self.settle
        if lagging and settled and stats.backlog > 0 and view.size < view.maximum:
            return Scaling(view.size + 1, f"lag: the oldest visible message waited {stats.lag:.1f}s")
        quiet = not lagging and view.now - view.last_change >= self.cooldown
        if view.size > view.minimum and quiet:
            recent = [s for at, s in view.samples if at >= view.now - self.cooldown] or [stats]
            most = view.clamp(max(self.wanted(s, view.concurrency) for s in recent))
            if most < view.size:
                return Scaling(most, f"quiet: at most {most} worker(s) needed for {self.cooldown:g}s")
        return Scaling(view.size, "steady")

    def _count(self, stats: QueueStats, view: PoolView) -> str:
        return f"{self.wanted(stats, view.concurrency)} worker(s) of {view.concurrency} threads"


def _described(stats: QueueStats) -> str:
    parts = [f"{stats.visible} visible" if stats.visible is not None else None]
    parts.append(f"{stats.in_flight} in flight" if stats.in_flight is not None else None)
    shown = ", ".join(part for part in parts if part)
    return f"{stats.work} messages" + (f" ({shown})" if shown else "")


def _positive(value: object, what: str, *, zero: bool = False) -> None:
    number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not number or not (value >= 0 if zero else value > 0):  # type: ignore[operator]
        raise InvalidValueError(what, f"must be a number {'>= 0' if zero else '> 0'}, not {value!r}")
