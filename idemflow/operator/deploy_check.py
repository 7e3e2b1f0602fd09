"""Before a deploy: which requests still open would the new code refuse (``idemflow check-deploy``;
Temporal's replayer, against the live store).

Every request a worker may still resume (``running``, ``failed``, ``cancelled``: the open runs
``idemflow runs list`` reads from each store's index of them) is replayed on the code given,
exactly as a worker resuming it would replay it (:mod:`idemflow.operator.replay`), reading only:
its memos are read and returned, nothing is executed, written, called or queued. A request
whose recorded steps the code meets differently (another name, table or partition at a step)
is listed with its :class:`~idemflow.errors.NonDeterminismError`'s step and both identities; a
request on a version the code does not hold, with the versions it does. The requests are read a
page at a time and each page's replays run side by side with their reads batched
(:mod:`idemflow.operator.lockstep`), so the check holds one page in memory and costs a few
batched reads per page.

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.client import submit
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("ship")
... def ship(n):
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="pack")
...     yield checkpoint()
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="send")
>>> store = MemoryStore()
>>> _ = submit(ship(1), request_id="s-1", store=store, queue=MemoryQueue())
>>> check_deploy(store, [ship]).ok
True
>>> @workflow("ship")
... def renamed(n):
...     yield atomic("tablea", "p", lambda tx: tx.increment("n"), name="wrap")
...     yield checkpoint()
>>> [problem.line() for problem in check_deploy(store, [renamed]).problems]
["ship v1 s-1: step 1 recorded 'atomic pack' but the code meets 'atomic wrap'"]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from idemflow.core.requests import Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError, NonDeterminismError
from idemflow.keys import RUNS_TABLE, memo_prefix, step_tag
from idemflow.operator.commands import RunSummary, aruns, runs
from idemflow.operator.lockstep import AHEAD, lockstep
from idemflow.operator.replay import Replayed, replay
from idemflow.records import RunRecord, RunStatus
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, PagedRuns, RowRef, Store

__all__ = ["DeployCheck", "DeployProblem", "acheck_deploy", "check_deploy"]

CHECKED = (RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED)
"""The statuses of a request a worker may still resume (after ``retry`` or ``resume``)."""
PAGE = 200
"""Requests read and replayed together."""


@dataclass(frozen=True, slots=True)
class DeployProblem:
    """A request the code given would refuse: what ``check-deploy`` lists."""

    workflow: str
    request_id: str
    version: int
    status: str
    kind: str
    """``non_determinism`` (a recorded step the code meets differently), ``version_not_held``
    (no code of its version) or ``raises`` (the code raised replaying a recorded step)."""
    step: int | None = None
    recorded: str | None = None
    """The identity the request recorded at ``step`` (``atomic pack``)."""
    met: str | None = None
    """The identity the code met there."""
    detail: str = ""

    def to_json(self) -> dict[str, JSON]:
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "version": self.version,
            "status": self.status,
            "kind": self.kind,
            "step": self.step,
            "recorded": self.recorded,
            "met": self.met,
            "detail": self.detail,
        }
        return {key: value for key, value in shown.items() if value not in (None, "")}

    def line(self) -> str:
        """One line, as ``idemflow check-deploy`` prints it."""
        head = f"{self.workflow} v{self.version} {self.request_id}: "
        if self.kind == "non_determinism":
            return head + f"step {self.step} recorded {self.recorded} but the code meets {self.met}"
        return head + self.detail


@dataclass(frozen=True, slots=True)
class DeployCheck:
    """What ``check-deploy`` found: how many open requests it replayed, and those that would break."""

    checked: int
    problems: tuple[DeployProblem, ...]
    not_replayed: int = 0
    """Open requests started by ``run`` (their record stores no input): their callers resume
    them by running them again, not a worker; they are not replayed."""

    @property
    def ok(self) -> bool:
        """No request would break: the deploy may go on."""
        return not self.problems

    def to_json(self) -> dict[str, JSON]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "not_replayed": self.not_replayed,
            "problems": [problem.to_json() for problem in self.problems],
        }


def check_deploy(
    store: Store, workflows: Iterable[Workflow[Any, Any]], *, workflow: str | None = None, page: int = PAGE
) -> DeployCheck:
    """Replay every open request of the workflows in ``workflows`` (or of ``workflow`` alone) on
    that code, reading only, and list those it would refuse (see the module docstring).

    >>> from idemflow.stores import MemoryStore
    >>> check_deploy(MemoryStore(), []).to_json()
    {'ok': True, 'checked': 0, 'not_replayed': 0, 'problems': []}
    """
    flows = _flows(workflows, workflow)
    totals = _Totals()
    for name in sorted(flows):
        for wanted in CHECKED:
            after: str | None = None
            while True:
                listed = runs(store, workflow=name, status=wanted, limit=page, after=after)
                drive(_page(store, flows[name], listed.runs, totals), store)
                after = listed.next
                if after is None:
                    break
    return totals.result()


async def acheck_deploy(
    store: Store | AsyncStore,
    workflows: Iterable[Workflow[Any, Any]],
    *,
    workflow: str | None = None,
    page: int = PAGE,
) -> DeployCheck:
    """:func:`check_deploy`, awaitable: the same pages, replays and batched reads on the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(acheck_deploy(MemoryStore(), [])).to_json()
    {'ok': True, 'checked': 0, 'not_replayed': 0, 'problems': []}
    """
    flows = _flows(workflows, workflow)
    target = to_async(store)
    paged = isinstance(sync_reader(target), PagedRuns)
    totals = _Totals()
    for name in sorted(flows):
        for wanted in CHECKED:
            if not paged:  # no paged listing (an SDK's asynchronous client): one scan, then pages
                listed = await aruns(target, workflow=name, status=wanted)
                for start in range(0, len(listed.runs), page):
                    await adrive(
                        _page(target, flows[name], listed.runs[start : start + page], totals), target
                    )
                continue
            after: str | None = None
            while True:
                listed = await aruns(target, workflow=name, status=wanted, limit=page, after=after)
                await adrive(_page(target, flows[name], listed.runs, totals), target)
                after = listed.next
                if after is None:
                    break
    return totals.result()


def _flows(
    workflows: Iterable[Workflow[Any, Any]], workflow: str | None
) -> dict[str, dict[int, Workflow[Any, Any]]]:
    """The code given, by workflow name and version (``workflow``: that one alone)."""
    flows: dict[str, dict[int, Workflow[Any, Any]]] = {}
    for flow in workflows:
        flows.setdefault(flow.name, {})[flow.version] = flow
    if workflow is not None:
        if workflow not in flows:
            raise InvalidInputError(f"the code given holds no workflow {workflow!r} to check")
        return {workflow: flows[workflow]}
    return flows


class _Totals:
    """What the pages found, added up."""

    def __init__(self) -> None:
        self.checked = 0
        self.not_replayed = 0
        self.problems: list[DeployProblem] = []

    def result(self) -> DeployCheck:
        return DeployCheck(self.checked, tuple(self.problems), self.not_replayed)


def _page(
    store: Store | AsyncStore,
    versions: dict[int, Workflow[Any, Any]],
    listed: tuple[RunSummary, ...],
    totals: _Totals,
) -> Steps[None]:
    """One page of open requests replayed side by side (reads only), their problems noted."""
    replays: list[Steps[Replayed]] = []
    replayed: list[RunSummary] = []
    ahead: list[RowRef] = []
    for summary in listed:
        record = summary.record
        flow = versions.get(record.version)
        if flow is None:
            held = ", ".join(str(version) for version in sorted(versions))
            why = f"version {record.version} is not in the code given (it holds {held})"
            totals.problems.append(_problem(summary, "version_not_held", detail=why))
            continue
        arguments = record.arguments()
        if arguments is None:
            totals.not_replayed += 1
            continue
        replays.append(replay(store, None, flow, record, summary.request_id, arguments))
        replayed.append(summary)
        ahead.extend(_first_memos(summary.workflow, summary.request_id, record))
    results = yield from lockstep(replays, ahead)
    totals.checked += len(results)
    for summary, result in zip(replayed, results, strict=True):
        problem = _judged(summary, result)
        if problem is not None:
            totals.problems.append(problem)


def _first_memos(workflow: str, request_id: str, record: RunRecord) -> list[RowRef]:
    """The memos a replay of the request reads first, read ahead with the page's first batch: the
    first steps beside its record and at the places its record names."""
    prefix = memo_prefix(workflow, request_id)
    places = record.places
    known = [record.failure.step if record.failure else 0, record.attempts.step if record.attempts else 0]
    last = max([places.steps if places else 0, *known])
    beside = range(1, last + AHEAD + 1)  # every other step's memo: its number may be any
    refs = [RowRef(RUNS_TABLE, request_id, prefix + step_tag(n)) for n in beside]
    for table, partition in places.at if places else ():  # up to the step after the last known
        refs.extend(RowRef(table, partition, prefix + step_tag(n)) for n in range(1, last + 2))
    return refs


def _judged(summary: RunSummary, result: Replayed) -> DeployProblem | None:
    """The problem a replay met, if any (a failed request's step raising again is its failure)."""
    error = result.error
    if isinstance(error, NonDeterminismError):
        return _problem(
            summary,
            "non_determinism",
            step=error.step,
            recorded=error.recorded,
            met=error.met,
            detail=str(error),
        )
    if error is None or summary.record.status is RunStatus.FAILED:
        return None
    forward = [found.number for found in result.found if found.tag == "s"]
    step = (max(forward) + 1) if forward else 1
    return _problem(
        summary, "raises", step=step, detail=f"replaying it raises {type(error).__name__}: {error}"
    )


def _problem(summary: RunSummary, kind: str, **fields: Any) -> DeployProblem:
    record = summary.record
    return DeployProblem(
        summary.workflow, summary.request_id, record.version, record.status.value, kind, **fields
    )
