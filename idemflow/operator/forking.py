"""Fork a request from one of its steps: a new request that keeps the old one's steps before
``from_step`` and runs the rest anew (``idemflow runs fork``; DBOS's ``fork_workflow``).

The old request's memos before ``from_step`` are copied under the new request id, each to the
place a replay of the new request reads it (an atomic step's beside its data, in the same table
and partition; every other step's beside the new run record), carrying the new request's own
incarnation. So replaying those steps applies no data change again (the data holds them
already) and makes no outside call again (their answers are copied), while every step from
``from_step`` on runs anew, with idempotency keys derived from the new request id.

The order of the writes keeps a crash at any point harmless. The new run record is claimed
first (insert if absent: of two forks to one new id one claims it), naming the fork in its note
(``forking ...``) and with no outbox entry, so nothing runs it; then the memos are copied; then
the note is cleared in the same commit as the outbox entry (or just after it, where a commit is
one partition), and the pointer is sent, as ``submit`` sends one. A fork that died is finished
by calling it again: it meets its own note, copies again (the same rows) and hands the request
to the workers. Everything that can be refused is refused before the claim.

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.client import submit
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue, Worker
>>> @workflow("tally")
... def tally(n):
...     yield atomic("tablea", "p", lambda tx: tx.increment("first", n), name="first")
...     yield checkpoint()
...     return (yield atomic("tablea", "p", lambda tx: tx.increment("second", n), name="second"))
>>> store, queue = MemoryStore(), MemoryQueue()
>>> _ = submit(tally(1), request_id="t-1", store=store, queue=queue)
>>> _ = Worker([tally], store=store, queue=queue).run(idle_timeout=0)
>>> forked = fork(store, [tally], "tally", "t-1", from_step=2, new_request_id="t-2", queue=queue,
...               input=([1], {}))  # t-1 completed: its record no longer holds its input
>>> _ = Worker([tally], store=store, queue=queue).run(idle_timeout=0)
>>> forked.status().value, [store.read(RowRef("tablea", "p", key)).value for key in ("dfirst", "dsecond")]
('completed', [1, 2])
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from idemflow.async_worklist._handles import AsyncPending, Pending
from idemflow.async_worklist._queue_answers import on_async_queue, on_queue
from idemflow.async_worklist.messages import Pointer, encode_pointer, resolve_signing_key
from idemflow.async_worklist.outbox import DEFAULT_GRACE
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Queue
from idemflow.core.places import Places
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, resent_until_deadline
from idemflow.core.requests import Commit, CommitCache, Read, ReadMany, Send, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import BackendError, InvalidInputError, RequestExistsError, VersionNotHeldError
from idemflow.keys import RUNS_TABLE, check_request_id, check_workflow_name, memo_prefix
from idemflow.operator.fork_rows import at_places, copied_published, fork_bounds
from idemflow.operator.reads import answered
from idemflow.operator.replay import replay
from idemflow.operator.stored_steps import partition_of, record_in
from idemflow.records import (
    OutboxEntry,
    RunRecord,
    RunStatus,
    new_incarnation,
    outbox_ref,
    run_ref,
    submitted_input,
)
from idemflow.running.request_spec import describe_request
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON, encode
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import (
    AsyncStore,
    Capabilities,
    Committed,
    Delete,
    Insert,
    Op,
    Put,
    Row,
    RowRef,
    Store,
)

__all__ = ["afork", "fork", "fork_note"]

Arguments = tuple[Sequence[Any], Mapping[str, Any]]


def fork_note(request_id: str, from_step: int) -> str:
    """The note a fork's new run record holds while its memos are copied (no worker runs it).

    >>> fork_note("o-1", 3)
    "forking: copying the steps before step 3 of request 'o-1'"
    """
    return f"forking: copying the steps before step {from_step} of request {request_id!r}"


def fork(
    store: Store,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    *,
    from_step: int,
    new_request_id: str | None = None,
    queue: Queue,
    input: Arguments | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] | None = None,
) -> Pending:
    """A new request running ``request_id``'s workflow again from ``from_step``: its steps
    before it are the old one's (copied, not run), the rest run anew under the workers.

    ``workflows`` holds the code of the version the old request ran (the new request runs on
    it too); ``new_request_id`` is the new request's id (default: the old one's with a random
    suffix). The old request may be failed, aborted, cancelled, completed or still running (a
    running one is forked from the steps it had committed when the fork read them, and goes on
    by itself). A finished request's record no longer holds its input: pass it again as
    ``input=(args, kwargs)``, checked against the stored fingerprint. Returns the new request's
    handle. Refused before anything is written: an unknown request
    (:class:`~idemflow.errors.RequestNotFoundError`), a ``from_step`` the request cannot be forked
    from (:class:`~idemflow.errors.ForkStepError`), a ``new_request_id`` in use
    (:class:`~idemflow.errors.RequestExistsError`), code without the version
    (:class:`~idemflow.errors.VersionNotHeldError`), a replay of the steps kept that the code
    refuses (:class:`~idemflow.errors.NonDeterminismError`).

    >>> from idemflow.stores import MemoryStore
    >>> from idemflow.worker import MemoryQueue
    >>> fork(MemoryStore(), [], "tally", "t-9", from_step=2, queue=MemoryQueue())
    Traceback (most recent call last):
    ...
    idemflow.errors.RequestNotFoundError: no request 't-9' of workflow 'tally' is known to this store
    """
    new_id = _new_id(request_id, new_request_id)
    steps = fork_steps(
        store,
        store,
        list(workflows),
        workflow,
        request_id,
        from_step,
        new_id,
        input,
        resolve_signing_key(signing_key),
        policy,
        clock or time.time,
    )
    drive(steps, store, on_queue(queue))
    return Pending(store, workflow, new_id)


async def afork(
    store: Store | AsyncStore,
    workflows: Iterable[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    *,
    from_step: int,
    new_request_id: str | None = None,
    queue: Queue | AsyncQueue,
    input: Arguments | None = None,
    signing_key: bytes | str | None = None,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] | None = None,
) -> AsyncPending:
    """:func:`fork`, awaitable: the same reads, writes and pointer on the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> from idemflow.worker import MemoryQueue
    >>> asyncio.run(afork(MemoryStore(), [], "tally", "t-9", from_step=1, queue=MemoryQueue()))
    Traceback (most recent call last):
    ...
    idemflow.errors.RequestNotFoundError: no request 't-9' of workflow 'tally' is known to this store
    """
    new_id = _new_id(request_id, new_request_id)
    target = to_async(store)
    steps = fork_steps(
        target,
        sync_reader(target),
        list(workflows),
        workflow,
        request_id,
        from_step,
        new_id,
        input,
        resolve_signing_key(signing_key),
        policy,
        clock or time.time,
    )
    await adrive(steps, target, on_async_queue(to_async_queue(queue)))
    return AsyncPending(target, workflow, new_id)


def _new_id(request_id: str, given: str | None) -> str:
    """The new request's id: the one given, else the old one's with a random suffix."""
    if given is not None:
        return check_request_id(given)
    suffix = "-fork-" + uuid.uuid4().hex[:12]
    return (request_id + suffix) if len(request_id) + len(suffix) <= 255 else uuid.uuid4().hex


def fork_steps(
    store: Store | AsyncStore,
    reader: Store | None,
    workflows: list[Workflow[Any, Any]],
    workflow: str,
    request_id: str,
    from_step: int,
    new_id: str,
    given: Arguments | None,
    key: bytes | None,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
) -> Steps[None]:
    """:func:`fork` as the engine's computation, for both APIs (see the module docstring)."""
    check_workflow_name(workflow)
    check_request_id(request_id)
    scanned = yield from partition_of(workflow, request_id)
    record = record_in(scanned, workflow, request_id)
    held = {flow.version: flow for flow in workflows if flow.name == workflow}
    flow = held.get(record.version)
    if flow is None:
        raise VersionNotHeldError(workflow, request_id, record.version, tuple(sorted(held)))
    arguments = _arguments(flow, record, given, request_id)
    if new_id == request_id:
        raise RequestExistsError(workflow, new_id)
    note = fork_note(request_id, from_step)
    new_ref = run_ref(workflow, new_id)
    found = yield from resent_until_deadline(Read(new_ref))
    if found is not None and not _ours(found, record, note):
        raise RequestExistsError(workflow, new_id)
    known: dict[RowRef, Row | None] = {RowRef(RUNS_TABLE, part, key): row for part, key, row in scanned}
    ahead = at_places(workflow, request_id, record)  # the atomic steps' memos, in one batched read
    if ahead:
        known.update(zip(ahead, (yield from resent_until_deadline(ReadMany(ahead))), strict=True))
    replaying = replay(store, reader, flow, record, request_id, arguments)
    replayed = yield from answered(replaying, known, (RUNS_TABLE, request_id))
    kept = fork_bounds(workflow, request_id, replayed, from_step)
    now = clock()
    retention = record.retention or (policy or DEFAULT_POLICY).retention
    expires = max(time.time(), now) + retention
    prefix = memo_prefix(workflow, new_id)
    copies: list[tuple[RowRef, dict[str, JSON]]] = []
    atomic: list[tuple[str, str]] = []
    for memo in kept:
        beside_record = memo.ref.table == RUNS_TABLE
        ref = RowRef(
            memo.ref.table, new_id if beside_record else memo.ref.partition, prefix + "s" + str(memo.number)
        )
        if not beside_record:
            atomic.append((memo.ref.table, memo.ref.partition))
        value = dict(memo.row.value) if isinstance(memo.row.value, dict) else {}
        copies.append((ref, value))
    copies.extend(copied_published(workflow, request_id, new_id, scanned, from_step))
    places = Places.of(atomic, max((m.number for m in kept if m.ref.table != RUNS_TABLE), default=0))
    claimed = RunRecord(
        record.fingerprint,
        RunStatus.RUNNING,
        version=record.version,
        input=submitted_input({"args": list(arguments[0]), "kwargs": dict(arguments[1])}, retention),
        waiting=note,
        started_at=now,
        incarnation=new_incarnation(),
        tags=record.tags,
        places=places,
    )
    if found is None:
        claim: JSON = claimed.to_json()
        outcome = yield from resent_until_deadline(
            Commit([Insert(new_ref, claim, encode(claim, envelope=3), expires)])
        )
        if not isinstance(outcome, Committed):  # another fork came first: the same one, or refused
            found = outcome.failures[0].existing
            if found is None or not _ours(found, record, note):
                raise RequestExistsError(workflow, new_id)
    if found is not None:  # the same fork, which died or races this one: its incarnation
        claimed = dataclasses.replace(claimed, incarnation=RunRecord.from_json(found.value).incarnation)
    capabilities = store.capabilities
    yield from _copy(copies, claimed.incarnation, expires, capabilities.max_ops_per_commit)
    yield from _hand_over(capabilities, workflow, new_id, claimed, note, expires, now, key)


def _arguments(
    flow: Workflow[Any, Any], record: RunRecord, given: Arguments | None, request_id: str
) -> tuple[list[Any], dict[str, Any]]:
    """The old request's input: its record's, or, once it finished, the one given again (checked)."""
    stored = record.arguments()
    if given is None:
        if stored is None:
            raise InvalidInputError(
                f"request {request_id!r} ({record.status.value}) no longer stores its input: "
                "pass it again, fork(..., input=(args, kwargs)) or --input"
            )
        return stored
    if not isinstance(given, tuple) or len(given) != 2:
        raise InvalidInputError(f"input must be (args, kwargs), not {given!r}")
    args, kwargs = list(given[0]), dict(given[1])
    if not describe_request(flow(*args, **kwargs)).matches(record.fingerprint):
        raise InvalidInputError(f"the input given is not request {request_id!r}'s (its fingerprint differs)")
    return args, kwargs


def _ours(found: Row, record: RunRecord, note: str) -> bool:
    """Whether an existing run record at the new id is this fork's own, still copying."""
    theirs = RunRecord.from_json(found.value)
    return theirs.waiting == note and theirs.fingerprint == record.fingerprint


def _copy(
    copies: list[tuple[RowRef, dict[str, JSON]]], incarnation: str | None, expires: float, per_commit: int
) -> Steps[None]:
    """Write the copied rows, memos with the new run's incarnation, one commit per partition."""
    by_place: dict[tuple[str, str], list[Op]] = {}
    for ref, value in copies:
        if "id" in value and incarnation is not None:  # a memo: the new run's
            value = {**value, "i": incarnation}
        by_place.setdefault((ref.table, ref.partition), []).append(
            Put(ref, value, encode(value, envelope=1), expires_at=expires)
        )
    for ops in by_place.values():
        for start in range(0, len(ops), per_commit):
            yield from resent_until_deadline(Commit(ops[start : start + per_commit]))


def _hand_over(
    capabilities: Capabilities,
    workflow: str,
    new_id: str,
    claimed: RunRecord,
    note: str,
    expires: float,
    now: float,
    key: bytes | None,
) -> Steps[None]:
    """Clear the fork's note with an outbox entry, then send the pointer, as ``submit`` does."""
    new_ref = run_ref(workflow, new_id)
    row = yield from resent_until_deadline(Read(new_ref))
    current = None if row is None else RunRecord.from_json(row.value)
    if row is not None and current is not None and current.waiting == note:
        ready: JSON = dataclasses.replace(current, waiting=None).to_json()
        entry: JSON = OutboxEntry(workflow, claimed.version, new_id, now + DEFAULT_GRACE).to_json()
        outbox = Put(outbox_ref(workflow, new_id), entry, encode(entry), expires_at=expires)
        rewrite = Put(new_ref, ready, encode(ready, envelope=3), row.version, expires)
        if capabilities.cross_partition_commit:
            yield from resent_until_deadline(Commit([rewrite, outbox]))
        else:  # the entry first: every memo is copied, so a relay sending it runs the request
            yield from resent_until_deadline(Commit([outbox]))
            yield from resent_until_deadline(Commit([rewrite]))
    body = encode_pointer(Pointer(workflow, claimed.version, new_id), key)
    try:
        yield Send(body, 0.0, None)
    except BackendError:  # QueueError, TransientError: the outbox entry's relay sends it
        return
    yield from resent_until_deadline(CommitCache([Delete(outbox_ref(workflow, new_id))]))
