"""Write the golden rows of the installed idemflow: ``python tests/golden/make_golden.py OUT.json``.

Run once per release with that release first on ``sys.path`` (0.1.0: commit 5bd1831); the JSON
it writes is committed and ``tests/test_golden.py`` replays it with every later version. It uses
only the API every release has: ``run``, ``submit``, ``checkpoint``, ``MemoryStore``, ``MemoryQueue``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from idemflow import WorkflowAborted, abort, atomic, checkpoint, run, workflow
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue


def debit(amount: int) -> Any:
    def body(tx: Any) -> int:
        tx.increment("balance", -amount)
        return amount

    return body


def refund(tx: Any, amount: int) -> None:
    tx.increment("balance", amount)


@workflow("golden")
def golden(req: dict[str, Any]) -> Any:
    """Debit, checkpoint, ship; aborts after the debit when asked (the debit is refunded)."""
    yield atomic("tablea", req["who"], debit(req["amount"]), compensate=refund, name="debit")
    yield checkpoint()
    if req.get("abort"):
        yield abort("cancelled")
    yield atomic("tableb", req["who"], lambda tx: tx.put(req["id"], "shipped") or "shipped", name="ship")
    return {"shipped": req["id"]}


class StopAfterFirstCommit(MemoryStore):
    """A process that died right after its first commit."""

    def __init__(self) -> None:
        super().__init__()
        self.commits = 0

    def commit(self, ops: Any) -> Any:
        if self.commits >= 1:
            raise SystemExit("died")
        self.commits += 1
        return super().commit(ops)


def main(out: str) -> None:
    store = MemoryStore()
    run(golden({"id": "done", "who": "ada", "amount": 5}), request_id="done", store=store)
    with contextlib.suppress(WorkflowAborted):
        aborting = golden({"id": "aborted", "who": "ada", "amount": 7, "abort": True})
        run(aborting, request_id="aborted", store=store)
    queue = MemoryQueue()
    submit(golden({"id": "queued", "who": "bob", "amount": 3}), request_id="queued", store=store, queue=queue)
    [message] = queue.receive()
    dying = StopAfterFirstCommit()
    with contextlib.suppress(SystemExit):
        run(golden({"id": "halfway", "who": "cy", "amount": 2}), request_id="halfway", store=dying)
    store.flush()
    write_golden(out, [store, dying], messages=[message.body])


def write_golden(out: str, stores: list[Any], **recorded: Any) -> None:
    """Write every row of ``stores`` to ``out`` as golden JSON, beside ``recorded`` (messages,
    the clock): the form ``tests/test_golden.py`` loads back into each store."""
    rows = [
        [table, partition, key, row.value]
        for source in stores
        for table in source.tables()
        for partition, key, row in source.scan(table)
    ]
    with open(out, "w") as file:
        json.dump({"rows": rows, **recorded}, file, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
