"""DynamoDB's transaction conflicts, produced at the SDK boundary for servers that never produce them.

The DynamoDB service runs transactions concurrently and cancels the ones
that meet each other on an item. DynamoDB Local and moto serialise them (a
table-wide lock, a single request thread), so code tested there has never
met a ``TransactionConflict``. :class:`DynamoDBConflicts` hooks a boto3
DynamoDB client's events and applies AWS's documented rules
(*Transaction conflict handling in DynamoDB*) to the calls this process has
in flight on that client:

- an item of a ``TransactWriteItems`` that is part of another ongoing
  ``TransactWriteItems``: the later transaction is cancelled
  (``TransactionCanceledException``, reason ``TransactionConflict`` on that
  item, ``None`` on the others);
- an item of a ``TransactGetItems`` that is part of an ongoing
  ``TransactWriteItems``, ``BatchWriteItem``, ``PutItem``, ``UpdateItem`` or
  ``DeleteItem``: the read is cancelled the same way;
- a ``PutItem``, ``UpdateItem`` or ``DeleteItem`` of an item in an ongoing
  ``TransactWriteItems``: ``TransactionConflictException``;
- ``GetItem``, ``BatchGetItem``, ``Query`` and ``Scan`` never conflict
  (they read committed data).

"In flight" is from the moment botocore is about to send a call until its
answer is parsed, as the service sees a transaction from its start to its
end. With ``phantom_rate`` a transactional call (or a single write) also
meets, at that rate, an ongoing transaction of a client outside this
process — one that is later cancelled, so it changes nothing — which makes
even single-threaded tests take the conflict paths. A cancelled call is
answered without reaching the server, as the service answers it: nothing
of it is applied.

>>> import boto3
>>> client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x",
...                       aws_secret_access_key="x", endpoint_url="http://127.0.0.1:9")
>>> with DynamoDBConflicts(client, phantom_rate=1.0) as conflicts:
...     try:
...         client.transact_get_items(TransactItems=[{"Get": {"TableName": "t",
...             "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}}}])
...     except client.exceptions.TransactionCanceledException as exc:
...         print(exc.response["CancellationReasons"][0]["Code"])
TransactionConflict
>>> conflicts.produced
Counter({'TransactGetItems': 1})
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from idemflow.core.urls import Url

Item = tuple[str, str]
"""(table name, canonical JSON of the item's key attributes)."""

_CONTEXT = "idemflow_conflicts_held"
_ONGOING = "Transaction is ongoing for the item"
_CANCELLED = "Transaction cancelled, please refer cancellation reasons for specific reasons "
_TX_WRITE, _TX_GET = "TransactWriteItems", "TransactGetItems"
_SINGLE = ("PutItem", "UpdateItem", "DeleteItem")
_OPERATIONS = (_TX_WRITE, _TX_GET, *_SINGLE, "BatchWriteItem")


class DynamoDBConflicts:
    """Install on a boto3 DynamoDB client (a context manager, or :meth:`install`/:meth:`uninstall`).

    ``key_attributes`` names the tables' key attributes, needed to find the
    item a ``PutItem`` or a transaction's ``Put`` writes (idemflow's tables
    use ``pk`` and ``sk``). :attr:`produced` counts the calls cancelled, by
    operation.
    """

    def __init__(
        self,
        client: Any,
        *,
        phantom_rate: float = 0.0,
        seed: int | None = None,
        key_attributes: Iterable[str] = ("pk", "sk"),
    ) -> None:
        if not 0.0 <= phantom_rate <= 1.0:
            raise ValueError(f"phantom_rate must be within [0, 1], not {phantom_rate!r}")
        self._events = client.meta.events
        self._phantom_rate = phantom_rate
        self._random = random.Random(seed)
        self._keys = tuple(key_attributes)
        self._lock = threading.Lock()
        self._transacting: Counter[Item] = Counter()  # items of ongoing TransactWriteItems
        self._writing: Counter[Item] = Counter()  # items of ongoing single and batch writes
        self.produced: Counter[str] = Counter()
        """Calls cancelled so far, by operation name."""
        self._installed = False

    def install(self) -> DynamoDBConflicts:
        if not self._installed:
            for operation in _OPERATIONS:
                self._events.register(f"before-call.dynamodb.{operation}", self._before)
                self._events.register(f"after-call.dynamodb.{operation}", self._after)
                self._events.register(f"after-call-error.dynamodb.{operation}", self._after)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            for operation in _OPERATIONS:
                self._events.unregister(f"before-call.dynamodb.{operation}", self._before)
                self._events.unregister(f"after-call.dynamodb.{operation}", self._after)
                self._events.unregister(f"after-call-error.dynamodb.{operation}", self._after)
            self._installed = False

    def __enter__(self) -> DynamoDBConflicts:
        return self.install()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()

    # -- the hooks ------------------------------------------------------------------------------

    def _before(self, model: Any, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> Any:
        operation = model.name
        body = json.loads(params.get("body") or b"{}")
        items = self._items(operation, body)
        with self._lock:
            if operation == _TX_WRITE:
                met = [item in self._transacting for item in items]
            elif operation == _TX_GET:
                met = [item in self._transacting or item in self._writing for item in items]
            elif operation in _SINGLE:
                met = [item in self._transacting for item in items]
            else:  # BatchWriteItem: only ever met by others
                met = [False] * len(items)
            if not any(met) and operation != "BatchWriteItem" and items and self._phantom():
                met[self._random.randrange(len(items))] = True
            if any(met):
                self.produced[operation] += 1
                return _cancelled(operation, met)
            held = self._transacting if operation == _TX_WRITE else self._writing
            if operation != _TX_GET:
                held.update(items)
                context[_CONTEXT] = (held, items)
        return None

    def _after(self, context: dict[str, Any], **_: Any) -> None:
        held_items = context.pop(_CONTEXT, None)
        if held_items is None:
            return
        held, items = held_items
        with self._lock:
            held.subtract(items)
            for item in items:
                if held[item] <= 0:
                    del held[item]

    def _phantom(self) -> bool:
        return self._phantom_rate > 0.0 and self._random.random() < self._phantom_rate

    def _items(self, operation: str, body: Mapping[str, Any]) -> list[Item]:
        if operation in (_TX_WRITE, _TX_GET):
            found: list[Item] = []
            for entry in body.get("TransactItems", []):
                ((_, action),) = entry.items()
                found.append(self._item(action))
            return found
        if operation == "BatchWriteItem":
            return [
                self._item({"TableName": table, **next(iter(request.values()))})
                for table, requests in body.get("RequestItems", {}).items()
                for request in requests
            ]
        return [self._item(body)]

    def _item(self, action: Mapping[str, Any]) -> Item:
        written = action.get("Item", {})
        key = action.get("Key") or {name: written[name] for name in self._keys if name in written}
        return (str(action["TableName"]), json.dumps(key, sort_keys=True))


def _cancelled(operation: str, met: list[bool]) -> tuple[AWSResponse, dict[str, Any]]:
    """The service's answer to a call that met an ongoing transaction (HTTP 400)."""
    metadata = {"HTTPStatusCode": 400, "HTTPHeaders": {}, "RetryAttempts": 0}
    if operation in (_TX_WRITE, _TX_GET):
        codes = ["TransactionConflict" if hit else "None" for hit in met]
        reasons = [
            {"Code": code, "Message": _ONGOING} if hit else {"Code": code}
            for code, hit in zip(codes, met, strict=True)
        ]
        message = _CANCELLED + f"[{', '.join(codes)}]"
        parsed: dict[str, Any] = {
            "Error": {"Code": "TransactionCanceledException", "Message": message},
            "CancellationReasons": reasons,
            "ResponseMetadata": metadata,
        }
    else:
        parsed = {
            "Error": {"Code": "TransactionConflictException", "Message": _ONGOING},
            "ResponseMetadata": metadata,
        }
    return AWSResponse("https://dynamodb.emulated", 400, HTTPHeaders(), None), parsed


def install_from_url(url: Url) -> Callable[[Any], None]:
    """The ``conflicts=RATE`` parameter of a ``dynamodb:`` store URL (see the store registry):
    checked now, before anything is opened, and returning what makes the opened store's
    client meet the service's transaction conflicts, phantom ones at ``RATE``.

    Only for a local server (the URL names an endpoint): on the real service the
    conflicts are real.
    """
    rate = url.seconds("conflicts")  # a number like seconds: the same parsing
    if rate is None or not (url.params.get("endpoint") and 0.0 <= rate <= 1.0):
        raise url.error("conflicts=RATE needs an endpoint (a local server) and a rate within [0, 1]")

    def install(store: Any) -> None:
        DynamoDBConflicts(store.client, phantom_rate=rate).install()

    return install


__all__ = ["DynamoDBConflicts", "install_from_url"]
