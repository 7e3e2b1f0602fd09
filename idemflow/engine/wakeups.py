"""Waking another request: a wake-up row the relay sends, and its message sent at once if it can.

A step that starts a child or sends a message, and a child's outcome, must
wake another request whatever crashes next: they commit a wake-up row (a
due outbox entry of its own, one per cause) with their own commit, then try
to send its continuation to the queue at once and clear the row. A queue
that fails (or none, under ``run``) leaves the row to a worker's relay.
"""

from __future__ import annotations

import dataclasses
import logging

from idemflow import telemetry
from idemflow.core.requests import CommitCache, Send, Steps
from idemflow.engine.given import Given, log
from idemflow.errors import BackendError
from idemflow.keys import RUNS_TABLE, outbox_partition, wake_key
from idemflow.records import OutboxEntry
from idemflow.serialization import JSON, encode
from idemflow.stores.base import Delete, Put, RowRef


def wake_row(given: Given, entry: OutboxEntry, cause: str) -> Put:
    """The wake-up of ``entry``'s request for ``cause``: relayed at once if nobody announces it."""
    wake = dataclasses.replace(entry, due=given.clock())
    value: JSON = wake.to_json()
    ref = RowRef(
        RUNS_TABLE, outbox_partition(entry.request_id), wake_key(entry.workflow, entry.request_id, cause)
    )
    return Put(ref, value, encode(value), expires_at=given.expiry())


def announce(given: Given, entry: OutboxEntry, ref: RowRef) -> Steps[None]:
    """Send the continuation of ``entry``'s request now, then clear its wake-up row at ``ref``."""
    if given.plan.announce is None:
        return
    try:
        yield Send(given.plan.announce(entry), 0.0, given.plan.lane)  # a child's is its parent's
    except BackendError as exc:
        fields = {"workflow": entry.workflow, "version": entry.version, "request_id": entry.request_id}
        telemetry.log_event(log, logging.WARNING, "send-failed-left-to-the-relay", **fields, error=str(exc))
        return
    yield CommitCache([Delete(ref)])
