"""What one execution is given, fixed before it starts: shared read-only by the engine's parts.

Every part of an :class:`~idemflow.engine.execution.Execution` (docs/architecture.md)
needs some of the same facts: which request, under which policy and plan,
whether telemetry is on. They are gathered once, frozen, and handed to each
part, so no part holds a copy another could change, and the hot path reads
a slot instead of asking :mod:`idemflow.telemetry` or formatting a key per step.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from idemflow.core.memos import incarnation_number
from idemflow.core.plan import Plan
from idemflow.core.policy import RetryPolicy
from idemflow.engine.tx import Reader
from idemflow.stores.base import Capabilities, RowRef

log = logging.getLogger("idemflow.engine")
"""Per-run and per-step events at DEBUG; nothing is formatted unless that level is on."""


class Given(NamedTuple):
    """One execution's fixed facts (see :class:`~idemflow.engine.execution.Execution` for the arguments).

    ``reader`` is where step bodies read: the blocking store itself, or None
    on an event loop, where a body's reads are fetched by the driver
    (:class:`~idemflow.core.requests.Prefetched`) and the body runs again. A tuple, not a
    frozen dataclass: one is built per execution, and a one-step request feels it.
    """

    capabilities: Capabilities
    workflow: str
    request_id: str
    fingerprint: str
    aliases: tuple[str, ...]
    """Other fingerprints of the same input (the call as written, as 0.1.0 fingerprinted it)."""
    policy: RetryPolicy
    clock: Callable[[], float]
    plan: Plan
    reader: Reader | None
    run_ref: RowRef
    memo_prefix: str
    traced: bool
    """OpenTelemetry is on: spans and counters (decided once per execution)."""
    logged: bool
    """The engine logger is at DEBUG: one structured line per run and per step."""

    @property
    def incarnation(self) -> int:
        """Which incarnation of its request this execution runs (1 unless the request continued as
        new): what its effects' keys and derived values are derived from, beside the step."""
        return incarnation_number(self.plan.incarnation)

    def expiry(self) -> float:
        """When rows written now may expire: a retention from now, by the later of wall time and
        the workflow's clock (a test's fixed clock in the past writes no row already expired; a
        clock moved weeks ahead, as a test simulates a long wait, writes rows that live as long
        from then), and no earlier than the bound the request's rows are kept until for a long
        wait (:attr:`~idemflow.core.plan.Plan.kept_until`), so that bound stays true."""
        at = max(time.time(), self.clock()) + self.policy.retention
        kept = self.plan.kept_until
        return at if kept is None or kept < at else kept

    def log_event(self, event: str, *, started: float, **fields: Any) -> None:
        """One structured engine log line (DEBUG): JSON text, and the same fields on the record."""
        extra = {
            "workflow": self.workflow,
            "version": self.plan.version,
            "request_id": self.request_id,
            **fields,
            "seconds": round(time.monotonic() - started, 6),
        }
        log.debug(json.dumps({"event": event, **extra}, default=str), extra=extra)
