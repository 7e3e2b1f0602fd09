"""Version 2 of the transfer workflow, and transfer inputs padded past a queue's body limit.

:func:`transfer_v2` is the sample's transfer (:func:`samples.transfer.workflows.transfer`,
version 1, unchanged) with a ``screen`` step before its first one: it counts, in the
``screens`` table, one screening per request in the partition of the source account, and its
result says ``"version": 2``. Version 1's memos and version 2's differ from the first step on,
so a request run on the other version's code would show: a version 1 request run on version 2
adds a screening nobody claimed on version 2, a version 2 request finished on version 1 code
answers without ``"version"``.

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
>>> from samples.transfer.workflows import open_account
>>> store = MemoryStore()
>>> for name in ("alice", "bob"):
...     _ = run(open_account({"account": name, "balance": 100}), request_id="open-" + name, store=store)
>>> receipt = run(transfer_v2({"src": "alice", "dst": "bob", "amount": 30}), request_id="t-1", store=store)
>>> receipt["left"], receipt["version"], screens(store)
(70, 2, {'alice': 1})
>>> [flow.version for flow in held([1, 2]) if flow.name == "transfer"]
[1, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

from idemflow import Idem, Tx, Workflow, abort, atomic, checkpoint, uuid4, workflow
from idemflow.stores import Store
from idemflow.testing import data_rows
from samples.transfer import workflows as v1
from samples.transfer.workflows import ACCOUNTS, TRANSFERS, Receipt, TransferRequest

SCREENS = "screens"
"""One partition per source account; ``screened`` counts the requests version 2 screened."""
TABLES = (*v1.TABLES, SCREENS)

PADDING = 300 * 1024
"""Characters of an oversize input's padding: more than the local queues' 256 KiB body limit
(:data:`idemflow.async_worklist.queues.base.DEFAULT_MAX_BODY_BYTES`)."""


class ChaosRequest(TransferRequest, total=False):
    """A transfer request, maybe carrying a ``padding`` the workflow ignores (an oversize input)."""

    padding: str


class ReceiptV2(Receipt):
    """What version 2 returns: version 1's receipt and the version."""

    version: int


def padded(requests: Sequence[tuple[str, TransferRequest]], every: int = 8) -> list[tuple[str, ChaosRequest]]:
    """``requests`` with one in ``every`` (the fourth, then each ``every``-th) padded to
    :data:`PADDING` characters.

    >>> got = padded([(f"r{n}", {"src": "a", "dst": "b", "amount": 1}) for n in range(9)])
    >>> [request_id for request_id, req in got if "padding" in req], len(got[3][1]["padding"])
    (['r3'], 307200)
    """
    out: list[tuple[str, ChaosRequest]] = []
    for n, (request_id, req) in enumerate(requests):
        request: ChaosRequest = {"src": req["src"], "dst": req["dst"], "amount": req["amount"]}
        if n % every == 3:
            request["padding"] = request_id.ljust(PADDING, ".")
        out.append((request_id, request))
    return out


def plain(req: ChaosRequest) -> TransferRequest:
    """The request without its padding: what the audit rows and the checks know of it."""
    return {"src": req["src"], "dst": req["dst"], "amount": req["amount"]}


def _screen() -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.increment("screened")

    return body


@workflow("transfer", version=2)
def transfer_v2(req: TransferRequest) -> Generator[Idem[Any], Any, ReceiptV2]:
    """Version 1's transfer with a ``screen`` step first; the receipt says ``"version": 2``."""
    src, dst, amount = req["src"], req["dst"], req["amount"]
    if type(amount) is not int or amount <= 0:
        yield abort("amount must be a positive integer")
    yield atomic(SCREENS, src, _screen(), name="screen")
    transfer_id: str = yield uuid4()
    left: int = yield atomic(
        ACCOUNTS, src, v1._debit(src, amount), compensate=v1._refund(amount), name="debit"
    )
    yield checkpoint()
    yield atomic(ACCOUNTS, dst, v1._credit(dst, amount), name="credit")
    yield atomic(TRANSFERS, src, v1._record(transfer_id, req), name="record")
    return {"transfer": transfer_id, "left": left, "version": 2}


VERSIONS: dict[int, Workflow[Any, Any]] = {1: v1.transfer, 2: transfer_v2}


def held(versions: Iterable[int]) -> list[Workflow[Any, Any]]:
    """What a worker holding these versions of ``transfer`` runs (``open_account`` too)."""
    return [v1.open_account, *(VERSIONS[version] for version in sorted(set(versions)))]


def screens(store: Store) -> dict[str, int]:
    """How many requests version 2 screened, per source account."""
    rows = data_rows(store, SCREENS).items()
    return {part: value for (_t, part, key), value in rows if key == "screened" and isinstance(value, int)}
