"""A duplicate of a finished request answered from one read of its run record, before anything
is built: where the store's reads are local (SQLite, memory: ``Capabilities.local_reads``), that
read costs a new request a few microseconds and spares a duplicate the execution that would find
its first commit refused (docs/decisions.md). ``run`` and blocking handlers read directly;
``arun`` reads as its computation's first request, where the driver runs the rest.
"""

from __future__ import annotations

import logging

from idemflow import records, telemetry
from idemflow.core.requests import Read, Steps
from idemflow.engine.given import log
from idemflow.errors import TransientError
from idemflow.running.request_spec import Request
from idemflow.stores.base import AsyncStore, Row, Store


def reads_first(store: Store | AsyncStore, request: Request) -> bool:
    """Whether ``run`` reads the run record before anything else: where a read is local (an
    embedded store), so that a duplicate of a finished request costs one read, not an execution
    built to find its first commit refused. Not under limits (a duplicate is gated as there), nor
    traced or logged (a duplicate's span and log line come from the execution, as elsewhere)."""
    return (
        store.capabilities.local_reads
        and (request.call is None or not request.call.limits)
        and not telemetry.enabled()
        and not log.isEnabledFor(logging.DEBUG)
    )


def finished_record(store: Store, request: Request, request_id: str) -> records.RunRecord | None:
    """The answer of a duplicate of a finished request, from one read where the store's reads are
    local (:func:`reads_first`); None: the engine's path decides."""
    if not reads_first(store, request):
        return None
    try:
        row = store.read(records.run_ref(request.workflow, request_id))
    except TransientError:
        return None  # the engine's path resends
    return answered(request, request_id, row)


def read_first(
    request: Request, request_id: str, steps: Steps[records.RunRecord]
) -> Steps[records.RunRecord]:
    """:func:`finished_record` as the first request of a computation, then ``steps`` if it is
    not the answer: on an event loop the read then runs where the driver runs the rest (a
    threaded store's pool), costing a new request no thread hop of its own."""
    try:
        row = yield Read(records.run_ref(request.workflow, request_id))
    except TransientError:
        row = None  # the engine's path resends
    found = answered(request, request_id, row)
    if found is not None:
        steps.close()
        return found
    return (yield from steps)


def answered(request: Request, request_id: str, row: Row | None) -> records.RunRecord | None:
    """The run record ``row`` if it is this request's and finished: the duplicate's answer. None
    sends the request down the engine's path, which meets whatever is there (a running request,
    another input's record) as its first commit would."""
    if row is None:
        return None
    record = records.RunRecord.from_json(row.value)
    return record if record.status.final and request.matches(record.fingerprint) else None


__all__ = ["answered", "finished_record", "read_first", "reads_first"]
