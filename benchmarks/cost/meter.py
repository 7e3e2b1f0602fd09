"""Backend calls counted where they leave the process, and what DynamoDB bills for them.

- **DynamoDB** (boto3 and aiobotocore clients alike): handlers on the client's events —
  ``before-call`` counts each API call with its operation name, ``before-send`` each HTTP
  attempt (a resend would show as attempts > calls); while *metering*,
  ``provide-client-params`` reads the images of every item a write will touch (through a peek
  client of its own, not counted) and ``after-call`` reads them again and prices the call
  (:func:`benchmarks.cost.units.call_units`). A client attached with ``capacity=True`` (the
  hand-written baselines only: idemflow's and Powertools' calls are never changed) also asks
  for ``ReturnConsumedCapacity='TOTAL'`` while metering, and DynamoDB Local's answer is kept
  beside the computed units for the page's cross-check.
- **Azure Tables**: an azure-core policy in each client's pipeline counts HTTP requests (an
  entity group transaction is one ``POST $batch``) with their method, kind and status.
- **On the caller's path or off it**: a call from a store's background thread (threads named
  ``…cache…`` or ``…expiry…``: completion records, expiry sweeps) or from an asyncio task other
  than the request's own (:data:`REQUEST_TASK`: the asynchronous store's completion record) is
  off the path; everything else the caller waited for.

Why apart: the variants only make calls; this module alone knows how calls are seen and priced.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from benchmarks.cost.units import (
    Schema,
    Target,
    Units,
    call_units,
    local_transaction_units,
    reported,
    schema_of,
    tables_of,
    write_targets,
)

DATA_PLANE = frozenset(
    (
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "GetItem",
        "BatchGetItem",
        "TransactGetItems",
        "Query",
        "Scan",
    )
)
"""The calls billed per request (table management is not)."""
REQUEST_TASK = "cost-request"
"""The name of the asyncio task a timed asynchronous request runs in (anything else is off the path)."""


def on_path() -> bool:
    """Whether the code running now is on the caller's path (see the module docstring)."""
    name = threading.current_thread().name
    if "cache" in name or "expiry" in name:
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return True
    return task is None or task.get_name() == REQUEST_TASK


@dataclass(frozen=True)
class Check:
    """A call's units by the documented rules beside DynamoDB Local's ``ConsumedCapacity``."""

    operation: str
    computed: float
    answered: float
    local_rule: float
    """Local's observed aggregation (:func:`~benchmarks.cost.units.local_transaction_units`)."""


@dataclass
class Counted:
    """Cumulative counts of one variant's resources (subtract two to get a round's)."""

    path: int = 0
    off: int = 0
    attempts: int = 0
    units_path: Units = field(default_factory=Units)
    units_off: Units = field(default_factory=Units)
    ops: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    """How many ConsumedCapacity answers were kept so far (an index into the meter's list)."""

    @property
    def all(self) -> int:
        return self.path + self.off

    @property
    def units(self) -> Units:
        return self.units_path + self.units_off

    def __add__(self, other: Counted) -> Counted:
        return Counted(
            self.path + other.path,
            self.off + other.off,
            self.attempts + other.attempts,
            self.units_path + other.units_path,
            self.units_off + other.units_off,
            self.ops + other.ops,
            self.checks,
        )

    def __sub__(self, other: Counted) -> Counted:
        ops = Counter(self.ops)
        ops.subtract(other.ops)
        return Counted(
            self.path - other.path,
            self.off - other.off,
            self.attempts - other.attempts,
            self.units_path - other.units_path,
            self.units_off - other.units_off,
            +ops,
            self.checks,
        )


class Meter:
    """Counts calls (and, while :attr:`metering`, their units) from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counted = Counted()
        self.metering = False
        self.checks: list[Check] = []
        """Every call whose answer carried ConsumedCapacity, beside the units computed for it."""

    def count(self, operation: str, path: bool) -> None:
        with self._lock:
            if path:
                self._counted.path += 1
            else:
                self._counted.off += 1
            self._counted.ops[operation if path else f"{operation} (off path)"] += 1

    def note(self, what: str) -> None:
        """An outcome worth showing beside the calls (a failed condition, an HTTP 409)."""
        with self._lock:
            self._counted.ops[what] += 1

    def attempt(self) -> None:
        with self._lock:
            self._counted.attempts += 1

    def spend(self, units: Units, path: bool) -> None:
        with self._lock:
            if path:
                self._counted.units_path = self._counted.units_path + units
            else:
                self._counted.units_off = self._counted.units_off + units

    def check(self, found: Check) -> None:
        with self._lock:
            self.checks.append(found)

    def snapshot(self) -> Counted:
        with self._lock:
            taken = copy.deepcopy(self._counted)
            taken.checks = len(self.checks)
            return taken


class DynamoMeter(Meter):
    """Attached to DynamoDB clients; ``peek`` is a boto3 client of its own (never counted) that
    reads item images and table schemas while metering."""

    def __init__(self, peek: Any) -> None:
        super().__init__()
        self._peek = peek
        self._schemas: dict[str, Schema] = {}

    def attach(self, client: Any, *, capacity: bool = False) -> None:
        """Count ``client``'s calls; ``capacity``: ask for ConsumedCapacity while metering."""
        events = client.meta.events
        events.register("provide-client-params.dynamodb", self._params(capacity))
        events.register("before-call.dynamodb", self._before_call)
        events.register("before-send.dynamodb", self._before_send)
        events.register("after-call.dynamodb", self._after_call)

    def schema(self, table: str) -> Schema:
        found = self._schemas.get(table)
        if found is None:
            found = self._schemas[table] = schema_of(self._peek.describe_table(TableName=table))
        return found

    def _images(self, targets: list[Target]) -> list[dict[str, Any] | None]:
        return [
            self._peek.get_item(TableName=t.table, Key=t.key, ConsistentRead=True).get("Item")
            for t in targets
        ]

    def _params(self, capacity: bool) -> Callable[..., None]:
        def params(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
            if not self.metering or model.name not in DATA_PLANE:
                return
            operation = model.name
            schemas = {table: self.schema(table) for table in tables_of(operation, params)}
            targets = write_targets(operation, params, schemas)
            for target, image in zip(targets, self._images(targets), strict=True):
                target.before = image
            context["cost"] = (dict(params), targets, schemas)
            if capacity and "ReturnConsumedCapacity" not in params:
                params["ReturnConsumedCapacity"] = "TOTAL"

        return params

    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        path = on_path()
        context["cost_path"] = path
        self.count(model.name, path)

    def _before_send(self, **_: Any) -> None:
        self.attempt()

    def _after_call(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        error = (parsed.get("Error") or {}).get("Code")
        if error:
            self.note(f"{model.name} failed: {error}")
        found = context.get("cost")
        if found is None:
            return
        params, targets, schemas = found
        failed = error in ("ConditionalCheckFailedException", "TransactionCanceledException")
        for target, image in zip(targets, self._images(targets), strict=True):
            target.after = target.before if failed else image
            target.failed = failed
        if model.name == "TransactWriteItems":
            self.note(f"TransactWriteItems of {len(targets)} item{'s' if len(targets) > 1 else ''}")
        units = call_units(model.name, params, parsed, targets, schemas)
        self.spend(units, bool(context.get("cost_path", True)))
        answered = reported(parsed)
        if answered is not None:
            local = (
                local_transaction_units(targets, schemas)
                if model.name == "TransactWriteItems"
                else units.total
            )
            self.check(Check(model.name, units.total, answered, local))


def azure_operation(method: str, url: str) -> str:
    """A readable name for an Azure Tables REST request (``POST $batch``, ``GET entity``, …)."""
    last = urlparse(url).path.rstrip("/").rsplit("/", 1)[-1]
    if last == "$batch":
        kind = "$batch (entity group transaction)"
    elif last.startswith("Tables"):
        kind = "table"
    elif "PartitionKey=" in last:
        kind = "entity"
    else:
        kind = "entities"  # an insert (POST) or a query (GET) on the table
    return f"{method} {kind}"


class AzureMeter(Meter):
    """Counts the HTTP requests of Azure Tables clients built with :meth:`hooks` among their options.

    azure-core's ``CustomHookPolicy`` runs the hooks after the retry policy (once per attempt),
    and a table client made by ``get_table_client`` shares its service client's policies (which
    ``per_retry_policies`` would not reach)."""

    def hooks(self) -> dict[str, Any]:
        """Client options: ``raw_request_hook`` and ``raw_response_hook``."""

        def request(pipeline_request: Any) -> None:
            http = pipeline_request.http_request
            self.count(azure_operation(http.method, http.url), on_path())
            self.attempt()

        def response(pipeline_response: Any) -> None:
            status = pipeline_response.http_response.status_code
            if status >= 300:
                http = pipeline_response.http_request
                self.note(f"{azure_operation(http.method, http.url)} answered {status}")

        return {"raw_request_hook": request, "raw_response_hook": response}
