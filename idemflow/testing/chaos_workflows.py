"""The asynchronous workflow the chaos suite drives, importable by worker processes
(``idemflow worker idemflow.testing.chaos_workflows:WORKFLOWS``).

A survey answer is recorded, the client is answered at the checkpoint, and a
background worker counts it in a tally and writes an audit row keyed by a
``uuid4()``. Answers ``"spam"`` abort after the checkpoint, so the record is
compensated (deleted) by the worker. Every piece of the asynchronous path —
steps before and after the checkpoint, ``uuid4()``, an abort and its
compensation — is therefore exercised while workers are being killed.

>>> from idemflow import MemoryStore, run
>>> store = MemoryStore()
>>> run(survey({"poll": "p", "user": "u1", "answer": "yes"}), request_id="r1", store=store)
{'counted': 'yes'}
>>> tallies(store, "p"), responses(store, "p")
({'yes': 1}, {'u1': 'yes'})
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow.async_worklist import checkpoint
from idemflow.compensation import abort
from idemflow.helpers import uuid4
from idemflow.monad import Idem, atomic
from idemflow.reads import rows
from idemflow.runner import workflow
from idemflow.serialization import JSON
from idemflow.stores.base import Store
from idemflow.tx import Tx

RESPONSES, TALLIES, AUDIT = "responses", "tallies", "audit"
SPAM = "spam"


def _record(user: str, answer: str) -> Any:
    def body(tx: Tx) -> str:
        tx.put(user, answer)
        return answer

    return body


def _forget(user: str) -> Any:
    def undo(tx: Tx, _answer: object) -> None:
        tx.delete(user)

    return undo


def _count(answer: str) -> Any:
    def body(tx: Tx) -> int:
        tx.increment(answer)
        return 1

    return body


@workflow("chaos_survey")
def survey(response: dict[str, str]) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    """Record, checkpoint, then tally and audit (or abort and un-record a ``spam`` answer)."""
    poll, user, answer = response["poll"], response["user"], response["answer"]
    yield atomic(RESPONSES, poll, _record(user, answer), compensate=_forget(user), name="record")
    yield checkpoint()
    if answer == SPAM:
        yield abort("spam")
    yield atomic(TALLIES, poll, _count(answer), name="count")
    stamp = yield uuid4()
    yield atomic(AUDIT, poll, lambda tx: tx.put(stamp, {"user": user, "answer": answer}), name="audit")
    return {"counted": answer}


WORKFLOWS = [survey]


def tallies(store: Store, poll: str) -> dict[str, JSON]:
    """``{answer: count}`` of one poll."""
    return {key: value for (_part, key), value in rows(store, TALLIES, poll).items()}


def responses(store: Store, poll: str) -> dict[str, JSON]:
    """``{user: answer}`` of one poll."""
    return {key: value for (_part, key), value in rows(store, RESPONSES, poll).items()}


def audit_rows(store: Store, poll: str) -> list[JSON]:
    """Every audit row of one poll."""
    return list(rows(store, AUDIT, poll).values())
