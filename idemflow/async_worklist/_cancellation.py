"""Cancel a submitted request (``idemflow cancel``), and with ``children=True`` the children it
started, depth first: an outcome that takes effect at once, undoing nothing.

The run record says ``cancelled`` as soon as :func:`cancel` returns, whatever the request waits
for (a timer, a message, a child, a retry's backoff, a limit): its handle's ``result()`` raises
:class:`~idemflow.errors.RequestCancelledError` then, and a continuation of it that a worker
takes later runs nothing. A worker inside it finishes the step it runs and calls out no more
(it reads the record before each outside call, and writes its completion only over the version
it read); if it completes the request first, the request
stays ``completed`` and :func:`cancel` says so. The parent that started a cancelled child is
woken, and its ``wait`` raises :class:`~idemflow.errors.ChildCancelledError`. ``retry``
(:mod:`idemflow.async_worklist._resumption`) resumes a cancelled request where it stopped.

A parent knows its children by the memos of its ``start`` steps (beside its run record, with
the child's workflow and request id), so the cascade needs no workflow code. Safe to run twice
and while workers run: each request is cancelled once, and one already cancelled or finished is
left as it is (its children are still looked at).

>>> from idemflow.stores import MemoryStore
>>> cancel(MemoryStore(), "checkout", "o-1")
Traceback (most recent call last):
...
idemflow.errors.InvalidInputError: no request 'o-1' of workflow 'checkout' is known to this store
"""

from __future__ import annotations

from idemflow.async_worklist import _runs
from idemflow.async_worklist._resumption import known_steps
from idemflow.async_worklist.aborts import stored_arguments
from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import Read, Scan, Steps
from idemflow.engine.drive import drive
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import InvalidInputError
from idemflow.keys import RUNS_TABLE, memo_prefix, parse_memo_key
from idemflow.records import Memo, RunRecord, RunStatus, of_earlier_run, run_ref
from idemflow.stores.async_adapters import to_async
from idemflow.stores.base import AsyncStore, Capabilities, Row, Store


def cancel(
    store: Store, workflow: str, request_id: str, *, reason: str = "cancelled", children: bool = False
) -> RunStatus:
    """Cancel an unfinished submitted request (and, with ``children``, every request it started,
    depth first); the status it had when the cancel was decided.

    ``running`` or ``failed``: it is ``cancelled`` now, and nothing more of it runs until
    :func:`~idemflow.admin.retry` resumes it; nothing is undone
    (:func:`~idemflow.admin.abort_request` undoes). ``cancelled``: it was already. ``completed``
    or ``aborted``: it ended first (a worker completing it as the cancel landed) and stays so.
    """
    steps = cancel_steps(workflow, request_id, reason, children, store.capabilities)
    return drive(steps, store)


async def acancel(
    store: Store | AsyncStore,
    workflow: str,
    request_id: str,
    *,
    reason: str = "cancelled",
    children: bool = False,
) -> RunStatus:
    """:func:`cancel`, awaitable: the same reads and writes on the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(acancel(MemoryStore(), "checkout", "o-1"))
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: no request 'o-1' of workflow 'checkout' is known to this store
    """
    target = to_async(store)
    return await adrive(cancel_steps(workflow, request_id, reason, children, target.capabilities), target)


def cancel_steps(
    workflow: str, request_id: str, reason: str, children: bool, capabilities: Capabilities
) -> Steps[RunStatus]:
    """:func:`cancel` as the engine's computation, for both APIs: the request named must be known
    and submitted; its children are cancelled where they can be (a child is skipped if it was
    collected, or finished, or already cancelled)."""
    if not isinstance(reason, str):
        raise InvalidInputError(f"a cancel's reason is text, not {type(reason).__name__}")
    record = yield from known_steps(workflow, request_id)
    was = record.status
    if not (was.final or was is RunStatus.CANCELLED):
        stored_arguments(record, request_id)  # only a submitted request can be resumed by workers
        was = yield from _runs.cancel_steps(workflow, request_id, reason, capabilities)
    if children:
        seen = {(workflow, request_id)}
        yield from _cascade(workflow, request_id, record, reason, capabilities, seen)
    return was


def _cascade(
    workflow: str,
    request_id: str,
    record: RunRecord,
    reason: str,
    capabilities: Capabilities,
    seen: set[tuple[str, str]],
) -> Steps[None]:
    """Cancel the children of ``workflow`` ``request_id`` (whose record is ``record``), each
    before its own children, in the order they were started; ``seen`` holds who was visited."""
    for child in (yield from children_steps(workflow, request_id, record)):
        if child in seen:
            continue
        seen.add(child)
        child_workflow, child_id = child
        found = yield from resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), Read(run_ref(*child)))
        if found is None:
            continue  # never claimed (its start did not commit), or collected
        child_record = RunRecord.from_json(found.value)
        status = child_record.status
        if not (status.final or status is RunStatus.CANCELLED) and child_record.arguments() is not None:
            yield from _runs.cancel_steps(child_workflow, child_id, reason, capabilities)
        yield from _cascade(child_workflow, child_id, child_record, reason, capabilities, seen)


def children_steps(workflow: str, request_id: str, record: RunRecord) -> Steps[list[tuple[str, str]]]:
    """The ``(workflow, request id)`` of every child the request started, in the order of its
    ``start`` steps: their memos sit beside its run record (a memo an earlier request with the
    same id left is not one of this run's)."""
    prefix = memo_prefix(workflow, request_id)
    rows: list[tuple[str, str, Row]] = yield Scan(RUNS_TABLE, request_id)
    started: list[tuple[int, tuple[str, str]]] = []
    for _, key, row in rows:
        parsed = parse_memo_key(key) if key.startswith(prefix) else None
        if parsed is None or of_earlier_run(row, record.incarnation):
            continue
        tag = parsed[2]
        memo = Memo.from_json(row.value)
        if memo is None or memo.aborted or tag[:1] != "s" or not tag[1:].isdigit():
            continue
        value = memo.value
        if memo.identity.startswith("start ") and isinstance(value, dict):
            child_workflow, child_id = value.get("wf"), value.get("id")
            if isinstance(child_workflow, str) and isinstance(child_id, str):
                started.append((int(tag[1:]), (child_workflow, child_id)))
    return [child for _, child in sorted(started)]
