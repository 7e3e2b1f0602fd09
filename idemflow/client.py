"""Everything a program outside a workflow calls: submit a request, read its status, hold its
handle, send it a message, read what workflows wrote and what a running request publishes (its
events and streams: :func:`get_event`, :func:`read_stream`).

Each blocking function has its asyncio twin, named ``a`` + its name (``submit``/``asubmit``,
``status``/``astatus``); each API has its own handle: :class:`Pending` from ``submit``,
:class:`AsyncPending` (awaited) from ``asubmit``.

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.worker import MemoryQueue
>>> @workflow("vote")
... def vote(ballot):
...     yield checkpoint()
...     yield atomic("votes", ballot["poll"], lambda tx: tx.increment(ballot["choice"]))
>>> store = MemoryStore()
>>> pending = submit(vote({"poll": "p", "choice": "yes"}), request_id="b-1", store=store, queue=MemoryQueue())
>>> pending.status() is RunStatus.RUNNING, status(store, "vote", "b-1").status.value
(True, 'running')
"""

from __future__ import annotations

from idemflow.async_worklist._handles import AsyncPending, Pending, RequestStatus, astatus, status
from idemflow.async_worklist._scheduling import Priority
from idemflow.async_worklist._submission import asubmit, submit
from idemflow.async_worklist.deliver import asend_message, send_message
from idemflow.records import RunStatus
from idemflow.running.published_reads import aget_event, aread_stream, get_event, read_stream
from idemflow.running.reads import aget, arows, get, rows

__all__ = [
    "AsyncPending",
    "Pending",
    "Priority",
    "RequestStatus",
    "RunStatus",
    "aget",
    "aget_event",
    "aread_stream",
    "arows",
    "asend_message",
    "astatus",
    "asubmit",
    "get",
    "get_event",
    "read_stream",
    "rows",
    "send_message",
    "status",
    "submit",
]
