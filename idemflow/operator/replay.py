"""A request's recorded steps replayed against code, reading only: what ``runs show --workflows``,
``check-deploy`` and ``fork`` share.

The code is run exactly as a resumed execution would run it (:func:`~idemflow.running.runner.execution_steps`
with the request's version, input and incarnation): each step reads its memo and returns it,
and the identity check that guards every resume (the step's name, table and partition against
the memo's) raises :class:`~idemflow.errors.NonDeterminismError` where the code and the memo
differ. Whatever would write, call out, queue or sleep ends the replay instead (the step a
request is at), so a replay never changes anything; it yields reads only, for a caller to answer
one at a time (:func:`idemflow.engine.drive.drive`) or many requests' at once
(:mod:`idemflow.operator.deploy_check`).

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.client import submit
>>> from idemflow.engine.drive import drive
>>> from idemflow.records import RunRecord, run_ref
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("two")
... def two(n):
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="first")
...     yield checkpoint()
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="second")
>>> store = MemoryStore()
>>> _ = submit(two(1), request_id="r-1", store=store, queue=MemoryQueue())
>>> record = RunRecord.from_json(store.read(run_ref("two", "r-1")).value)
>>> replayed = drive(replay(store, store, two, record, "r-1", ([1], {})), store)
>>> [(step.number, step.name) for step in replayed.steps], replayed.stopped_at, replayed.error
([(1, 'first')], 'step 2 (atomic second)', None)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from idemflow.core.plan import Checkpointed, Finished, Plan, Suspended
from idemflow.core.requests import (
    CallOut,
    Commit,
    CommitCache,
    Launch,
    Read,
    ReadMany,
    Send,
    Settle,
    Sleep,
    Steps,
    Turn,
)
from idemflow.engine.drive import STORE_REQUESTS
from idemflow.keys import parse_memo_key
from idemflow.operator.stored_steps import StepView, step_of
from idemflow.records import Memo, RunRecord, run_ref
from idemflow.running.request_spec import describe_request
from idemflow.running.runner import execution_steps
from idemflow.running.workflows import Workflow
from idemflow.stores.base import AsyncStore, Row, RowRef, Store

__all__ = ["Replayed", "replay"]

WRITES = (Commit, CommitCache, CallOut, Launch, Send, Settle, Sleep, Turn)
"""Requests a replay that only reads must not carry out: it stops at the first."""


@dataclass(frozen=True, slots=True)
class Found:
    """A memo of this run the replay read: its step number, tag letter, place and row."""

    number: int
    tag: str
    """``s`` a forward step, ``c``/``u`` an undo."""
    ref: RowRef
    row: Row
    view: StepView | None
    """The step as ``runs show`` lists it (None: a memo holding a place, after a timer)."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay met: the memos it read, in order, and where and why it stopped."""

    found: tuple[Found, ...]
    stopped_at: str | None
    """The step the replay would have run anew (described), if it reached one."""
    waits_for: str | None
    """What the request waits for (a timer, a child, a message), if the replay met the wait."""
    error: Exception | None
    """What the code raised on replay (a :class:`~idemflow.errors.NonDeterminismError` ...)."""
    finished: bool = False
    """The replay reached the workflow's end (its outcome would be written next)."""

    @property
    def steps(self) -> list[StepView]:
        """The forward steps found, as ``runs show`` lists them."""
        return [found.view for found in self.found if found.tag == "s" and found.view is not None]


def replay(
    store: Store | AsyncStore,
    reader: Store | None,
    flow: Workflow[Any, Any],
    record: RunRecord,
    request_id: str,
    arguments: tuple[list[Any], dict[str, Any]],
) -> Steps[Replayed]:
    """Replay ``record``'s request on ``flow`` (the code of its version) with ``arguments``,
    yielding reads only (see the module docstring)."""
    args, kwargs = arguments
    m = flow(*args, **kwargs)
    request = describe_request(m)
    plan = Plan(
        version=record.version,
        resume=True,
        suspend=True,
        retry_in_place=False,
        fold=False,
        incarnation=record.incarnation,
    )
    computation = execution_steps(m, request, request_id, store, None, time.time, plan, (), reader=reader)
    found: list[Found] = []
    stopped_at: str | None = None
    waits_for: str | None = None
    error: Exception | None = None
    finished = False
    try:
        answer: Any = None
        failure: BaseException | None = None
        while True:
            wanted = computation.send(answer) if failure is None else computation.throw(failure)
            answer = failure = None
            if isinstance(wanted, WRITES):
                stopped_at = _described(wanted, found)
                finished = _is_outcome(wanted, flow.name, request_id)
                break
            if type(wanted) not in STORE_REQUESTS:
                break
            try:
                answer = yield wanted
            except Exception as exc:  # noqa: BLE001 - the store's error, where the code asked
                failure = exc
                continue
            refs, rows = _read(wanted, answer)
            for ref, row in zip(refs, rows, strict=True):
                seen = step_of(ref, row, record.incarnation)
                if seen is not None and row is not None:
                    found.append(Found(seen[0], seen[1], ref, row, seen[2]))
    except Suspended as suspended:
        waits_for = suspended.why
    except (Checkpointed, Finished):
        pass
    except StopIteration:
        finished = True
    except Exception as exc:  # noqa: BLE001 - a replay that raises is where the request stands
        error = exc
    finally:
        computation.close()
    return Replayed(tuple(found), stopped_at, waits_for, error, finished)


def _read(wanted: object, answer: Any) -> tuple[list[RowRef], list[Row | None]]:
    """The refs a read asked for and the rows it was answered with (none for a scan)."""
    if isinstance(wanted, Read):
        return [wanted.ref], [answer]
    if isinstance(wanted, ReadMany):
        return list(wanted.refs), list(answer)
    return [], []


def _is_outcome(wanted: object, workflow: str, request_id: str) -> bool:
    """Whether the write a replay stopped at is the request's completion record alone."""
    if not isinstance(wanted, (Commit, CommitCache)):
        return False
    record = run_ref(workflow, request_id)
    return all(op.ref == record for op in wanted.ops)


def _described(wanted: Any, found: list[Found]) -> str:
    """The step a replay stopped at, from what it was about to do."""
    forward = [item.number for item in found if item.tag == "s"]
    number = (max(forward) + 1) if forward else 1
    if isinstance(wanted, Launch):  # a branch of all_of / any_of: its call or its wait
        wanted = wanted.request
    if isinstance(wanted, CallOut):
        return f"step {number} (effect {wanted.name})"
    if isinstance(wanted, Commit) and wanted.ops:
        first = wanted.ops[0]
        parsed = parse_memo_key(first.ref.key)
        memo = Memo.from_json(getattr(first, "value", None))
        if parsed is not None and memo is not None and parsed[2][1:].isdigit():
            return f"step {int(parsed[2][1:])} ({memo.identity})"
    return f"step {number}"
