"""Workflows for the asynchronous tests, importable by worker processes
(``idemflow worker tests.support.async_workflows:WORKFLOWS``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow


def record(tx: Tx, response: dict[str, Any]) -> str:
    tx.put(response["user"], response["answer"])
    return str(response["answer"])


@workflow("survey")
def survey(response: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Record a response, count it in another table; checkpoints at ``response['at']`` positions."""
    space, at = response["space"], response["at"]
    if 0 in at:
        yield checkpoint()
    answer = yield atomic("tablea", space + "responses", lambda tx: record(tx, response), name="record")
    if 1 in at:
        yield checkpoint()
    count = yield atomic("tableb", space + "summary", lambda tx: _counted(tx, answer), name="count")
    if 2 in at:
        yield checkpoint()
    if response.get("abort"):
        yield atomic("tableb", space + "summary", lambda tx: tx.abort("closed"), name="closed")
    return {"counted": count}


WORKFLOWS = [survey]


def _counted(tx: Tx, answer: str) -> str:
    tx.increment(answer)
    return answer
