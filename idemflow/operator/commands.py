"""What an operator needs: list requests by workflow, status, age and tags, a page at a time; abort one.

``runs`` lists a page of at most ``limit`` requests and a cursor for the next
one (keyset paging, stable while requests arrive), reading about a page of
records, not the table: newest first on SQLite (an index of run records' start
times) and the memory store; in key order on DynamoDB (a paged scan, or its
sparse index of open runs for the statuses an operator acts on) and Azure
Tables (a paged query), whose scans have no order by time. Tags (``tags={"customer": "c-1"}``)
keep the requests that carry all of them: a filter over the pages read, which SQLite applies in
its query and DynamoDB server-side, and every store in the pages it reads.
``abort_request`` ends a request that has not finished: every step not yet
committed aborts (an abort memo, so a worker racing it agrees), the
compensations of the committed steps run once in reverse order, and the
request ends ``aborted``. It needs the request's input, which ``submit``
stores; a request started by :func:`idemflow.run` is resumed by running it
again instead.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> run(atomic("items", "p", lambda tx: "ok"), request_id="r-1", store=store)
'ok'
>>> page = runs(store, limit=10)
>>> [(found.request_id, found.status.value) for found in page.runs], page.next
([('r-1', 'completed')], None)
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from idemflow.async_worklist.aborts import abort_steps
from idemflow.core.policy import RetryPolicy
from idemflow.core.tags import TagFilter, carries, tag_filter
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError
from idemflow.keys import RUN, RUNS_TABLE, check_duration
from idemflow.records import OPEN_STATUSES, RunRecord, RunStatus
from idemflow.running.runner import run_status
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores._runs_order import NEWEST_FIRST, newest_first
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, PagedRuns, RunQuery, RunRow, Store

ABORT_WAIT = 30.0
"""Seconds an operator's :func:`abort_request` retries a failing compensation before it hands it back."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One request as ``idemflow runs list`` shows it."""

    workflow: str
    request_id: str
    record: RunRecord

    @property
    def status(self) -> RunStatus:
        return self.record.status

    def age_from(self) -> float | None:
        """When it started (or, for records written by 0.1, when it finished)."""
        return self.record.started_at if self.record.started_at is not None else self.record.finished_at

    def to_json(self) -> dict[str, JSON]:
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "request_id": self.request_id,
            "status": self.status.value,
            "version": self.record.version,
            "started_at": self.record.started_at,
            "finished_at": self.record.finished_at,
            "failure": None if self.record.failure is None else self.record.failure.to_json(),
            "waiting": self.record.waiting,
            "tags": None if self.record.tags is None else dict(self.record.tags),
        }
        return {key: value for key, value in shown.items() if value is not None}


@dataclass(frozen=True, slots=True)
class RunsPage:
    """A page of :func:`runs`: at most ``limit`` requests, and the cursor of the next page
    (None once there is none), to pass as ``after=`` (``idemflow runs list --after``).

    ``order`` is the store's (:class:`~idemflow.stores.base.PagedRuns`): ``"newest first"``
    (SQLite, memory, and any store without a paged listing of its own) or ``"key order"``
    (DynamoDB, Azure Tables: their scans have no order by time).
    """

    runs: tuple[RunSummary, ...]
    next: str | None
    order: str

    def to_json(self) -> dict[str, JSON]:
        return {"runs": [found.to_json() for found in self.runs], "next": self.next, "order": self.order}


LISTING_PAGE = 1000
"""Run records asked of the store per call when ``runs`` has no limit (it reads every page)."""


def runs(
    store: Store,
    *,
    workflow: str | None = None,
    status: RunStatus | None = None,
    older_than: float | None = None,
    limit: int | None = None,
    after: str | None = None,
    now: Callable[[], float] = time.time,
    tags: Mapping[str, str] | None = None,
) -> RunsPage:
    """Requests with a run record, filtered by workflow, status, age (seconds) and tags, a page
    of at most ``limit`` (None: every one) after the cursor ``after``, in the store's order.

    ``tags`` keeps the requests whose tags (``submit(tags=)``, ``run(tags=)``) include every one
    given: ``runs(store, tags={"customer": "c-1"})`` lists every request of customer c-1. It is a
    filter on the records a page reads, so a page may cost more reads than it lists requests
    (as ``older_than`` off SQLite), never a request missed or listed twice.

    Keyset paging: a cursor names the last request of its page, not a count, so requests
    started meanwhile never shift a page (on SQLite and memory they join the first). A page
    costs about ``limit`` records read, not the whole table: SQLite seeks an index of start
    times, DynamoDB reads its index of open runs for ``running``, ``failed`` and ``cancelled``;
    ``older_than`` is a start on SQLite and memory and a filter elsewhere.
    """
    listing = _listing(workflow, status, older_than, limit, after, now, tag_filter(tags))
    order = store.runs_order if isinstance(store, PagedRuns) else NEWEST_FIRST
    try:
        query = next(listing)
        while True:
            query = listing.send(_page(store, query))
    except StopIteration as done:
        found, cursor = done.value
        return RunsPage(found, cursor, order)


async def aruns(
    store: Store | AsyncStore,
    *,
    workflow: str | None = None,
    status: RunStatus | None = None,
    older_than: float | None = None,
    limit: int | None = None,
    after: str | None = None,
    now: Callable[[], float] = time.time,
    tags: Mapping[str, str] | None = None,
) -> RunsPage:
    """:func:`runs`, awaitable: the same filters (``tags`` too), pages and cursors.

    A blocking store (or one :func:`~idemflow.open_async_store` runs on threads) pages
    with its own listing; an asynchronous cloud store has no paged listing yet, so it reads
    its run-record table with one awaited scan and pages it newest first.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(aruns(MemoryStore(), limit=10)).runs
    ()
    """
    target = to_async(store)
    blocking = sync_reader(target)
    paged = blocking if isinstance(blocking, PagedRuns) else None
    order = paged.runs_order if paged is not None else NEWEST_FIRST
    listing = _listing(workflow, status, older_than, limit, after, now, tag_filter(tags))
    try:
        query = next(listing)
        while True:
            if paged is not None:
                page = await asyncio.to_thread(paged.run_page, query)  # the blocking store's own call
            else:
                scanned = await target.scan(RUNS_TABLE)
                page = newest_first(((RUNS_TABLE, part, key, row) for part, key, row in scanned), query)
            query = listing.send(page)
    except StopIteration as done:
        found, cursor = done.value
        return RunsPage(found, cursor, order)


Listing = Generator[RunQuery, list[RunRow], tuple[tuple["RunSummary", ...], str | None]]
"""What :func:`runs` decides, apart from where pages come from: it yields the query of each
page it needs and returns the requests found and the next cursor."""


def _listing(
    workflow: str | None,
    status: RunStatus | None,
    older_than: float | None,
    limit: int | None,
    after: str | None,
    now: Callable[[], float],
    tags: TagFilter = (),
) -> Listing:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError(f"limit must be a whole number of requests >= 1, not {limit!r}")
    cutoff = None if older_than is None else now() - older_than
    query = RunQuery(
        LISTING_PAGE if limit is None else limit,
        after=None if after is None else position_of(after),
        workflow=workflow,
        status=None if status is None else status.value,
        open_only=status is not None and status.value in OPEN_STATUSES,
        started_by=cutoff,
        tags=tags,
    )
    found: list[RunSummary] = []
    while True:
        page = yield query
        for item in page:
            summary = _listed(item, workflow, status, cutoff, tags)
            if summary is not None:
                found.append(summary)
                if len(found) == limit:
                    return tuple(found), cursor_of(item.position)
        if len(page) < query.limit:
            return tuple(found), None
        query = dataclasses.replace(query, after=page[-1].position)


def _page(store: Store, query: RunQuery) -> list[RunRow]:
    """A page from the store's own listing, or, for a store without one, from a scan."""
    return store.run_page(query) if isinstance(store, PagedRuns) else _scanned(store, query)


def _scanned(store: Store, query: RunQuery) -> list[RunRow]:
    """A page from a scan of the run-record table, newest first (as SQLite's)."""
    return newest_first(((RUNS_TABLE, part, key, row) for part, key, row in store.scan(RUNS_TABLE)), query)


def _listed(
    item: RunRow, workflow: str | None, status: RunStatus | None, cutoff: float | None, tags: TagFilter
) -> RunSummary | None:
    """The summary of a listed record if it passes every filter (a store's are hints)."""
    if not item.key.startswith(RUN) or (workflow is not None and item.key[1:] != workflow):
        return None
    try:
        summary = RunSummary(item.key[1:], item.partition, RunRecord.from_json(item.row.value))
    except (KeyError, TypeError, ValueError):
        return None  # not a run record this version can read: left to the tools of its version
    if status is not None and summary.status is not status:
        return None
    if not carries(summary.record.tags, tags):
        return None
    started = summary.age_from()
    if cutoff is not None and (started is None or started > cutoff):
        return None
    return summary


def cursor_of(position: str) -> str:
    """The cursor a user passes on: a store's position, in characters a shell leaves alone."""
    return base64.urlsafe_b64encode(position.encode("utf-8")).decode("ascii").rstrip("=")


def position_of(cursor: str) -> str:
    """The store position a cursor holds; :class:`InvalidInputError` for anything else."""
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (TypeError, ValueError) as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InvalidInputError(f"not a cursor of a list of runs: {cursor!r}") from exc


def known_run(store: Store, workflow: str, request_id: str) -> RunRecord:
    """The run record of a request, or :class:`InvalidInputError` if this store has none."""
    record = run_status(store, workflow, request_id)
    if record is None:
        raise InvalidInputError(f"no request {request_id!r} of workflow {workflow!r} is known to this store")
    return record


def abort_request(
    store: Store,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    *,
    reason: JSON,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    wait: float = ABORT_WAIT,
) -> RunRecord:
    """Compensate an unfinished request and end it ``aborted``; its record if it already finished.

    Safe to run twice and while workers run it: memos decide every step, so
    if a worker commits the last step first, the request ends ``completed``
    and that record is returned.

    A compensation that fails is retried here under its policy for at most
    ``wait`` seconds in all; then the request ends ``failed`` naming it and
    :class:`~idemflow.errors.CompensationError` is raised: ``retry`` hands
    the rest of the undo to workers, who retry it under the full policy.
    """
    budget = check_duration(wait, "abort wait", zero=True)
    steps = abort_steps(
        store, workflows, workflow, request_id, reason, policy, clock, reader=store, in_place_for=budget
    )
    return drive(steps, store)


async def aabort_request(
    store: Store | AsyncStore,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    *,
    reason: JSON,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    wait: float = ABORT_WAIT,
) -> RunRecord:
    """:func:`abort_request`, awaitable: the same steps, compensations and memos on the event loop.

    A compensation that is a plain function runs on a thread, as under :func:`idemflow.arun`.
    """
    budget = check_duration(wait, "abort wait", zero=True)
    target = to_async(store)
    steps = abort_steps(
        target,
        workflows,
        workflow,
        request_id,
        reason,
        policy,
        clock,
        reader=sync_reader(target),
        in_place_for=budget,
    )
    return await adrive(steps, target)
