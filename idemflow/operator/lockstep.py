"""Many read-only computations run side by side, their reads batched: what ``check-deploy`` replays
a page of requests with.

Each computation (a replay, :mod:`idemflow.operator.replay`) asks for one row at a time. Run one
after another, 10,000 requests of five steps would cost 50,000 round trips; run in lockstep, every
computation is advanced until it asks for a row nobody has read yet, then the rows all of them
wait for are read in one batched read (``read_many``, which each store splits as its backend
needs), and every computation goes on. What a caller reads ahead (``ahead``: the first memos of
each request) rides in the first batch; a row asked for later is read alone in its batch (most
are the step a request is at, which has no memo: reading the numbers after it would be waste).
A page of requests then costs a few batched reads, not one read per step.

>>> from idemflow.core.row import RowRef
>>> from idemflow.engine.drive import drive
>>> from idemflow.stores import MemoryStore
>>> def one(key):
...     return (yield Read(RowRef("tablea", "p", key)))
>>> drive(lockstep([one("a"), one("b")], []), MemoryStore())
[None, None]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import Read, ReadMany, Steps
from idemflow.stores.base import Row, RowRef

T = TypeVar("T")

AHEAD = 4
"""Step numbers past the last one a request's record knows whose memos beside it are read ahead."""
CHUNK = 1000
"""Rows one batched read asks for (each store splits it as its backend needs)."""


@dataclass(slots=True)
class _Running(Generic[T]):
    steps: Steps[T]
    wanted: Any = None
    done: bool = False
    value: T | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Rows:
    known: dict[RowRef, Row | None] = field(default_factory=dict)

    def holds(self, request: object) -> bool:
        if isinstance(request, Read):
            return request.ref in self.known
        if isinstance(request, ReadMany):
            return all(ref in self.known for ref in request.refs)
        return False

    def answer(self, request: object) -> Any:
        if isinstance(request, Read):
            return self.known[request.ref]
        assert isinstance(request, ReadMany)
        return [self.known[ref] for ref in request.refs]


def lockstep(computations: Sequence[Steps[T]], ahead: Iterable[RowRef]) -> Steps[list[T]]:
    """The values of ``computations`` (in order), run side by side with their reads batched;
    ``ahead`` is read first, in the same batch as the first reads they ask for. A computation's
    error is raised once every one has ended."""
    rows = _Rows()
    running = [_Running(steps) for steps in computations]
    for item in running:
        _advance(item, rows, None, None)
    first = list(dict.fromkeys(ahead))
    while True:
        waiting = [item for item in running if not item.done]
        if not waiting and not first:
            break
        wanted: dict[RowRef, None] = dict.fromkeys(first)
        first = []
        for item in waiting:
            request = item.wanted
            if isinstance(request, (Read, ReadMany)):
                for ref in [request.ref] if isinstance(request, Read) else list(request.refs):
                    if ref not in rows.known:
                        wanted[ref] = None
                continue
            try:  # not a read: carried out alone
                answer = yield request
            except Exception as exc:  # noqa: BLE001 - thrown back where the computation asked
                _advance(item, rows, None, exc)
                continue
            _advance(item, rows, answer, None)
        refs = [ref for ref in wanted if ref not in rows.known]
        for start in range(0, len(refs), CHUNK):
            chunk = refs[start : start + CHUNK]
            found: list[Row | None] = yield from resent(
                DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), ReadMany(chunk)
            )
            rows.known.update(zip(chunk, found, strict=True))
        for item in waiting:
            if not item.done and rows.holds(item.wanted):
                _advance(item, rows, rows.answer(item.wanted), None)
    for item in running:
        if item.error is not None:
            raise item.error
    return [item.value for item in running]  # type: ignore[misc]


def _advance(item: _Running[T], rows: _Rows, answer: Any, failure: BaseException | None) -> None:
    """Run ``item`` on until it asks for a row not read yet (or anything else), or ends."""
    while True:
        try:
            request = item.steps.send(answer) if failure is None else item.steps.throw(failure)
        except StopIteration as stop:
            item.done, item.value = True, stop.value
            return
        except Exception as exc:  # noqa: BLE001 - raised by the caller once every one ended
            item.done, item.error = True, exc
            return
        failure = None
        if rows.holds(request):
            answer = rows.answer(request)
            continue
        item.wanted = request
        return
