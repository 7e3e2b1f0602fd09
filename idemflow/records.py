"""Formats of the bookkeeping rows: step memos and run records.

A memo is ``{"id": identity, "v": result}`` for a committed step, or
``{"id": identity, "abort": reason}`` for a step that aborted the workflow.
``identity`` names the step (``atomic debit``, ``now``, ``effect charge``), so
a replay that meets another step's memo is caught as non-determinism.

A run record is ``{"fp": input fingerprint, "status": ...}`` plus ``result``
or ``reason`` once finished. It lives at ``(RUNS_TABLE, request id,
run_key(workflow))``. Its ``running`` form is the durable claim on the
fingerprint; the finished form is only a cache (losing it costs a replay).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from idemflow.serialization import JSON


class RunStatus(enum.StrEnum):
    """Where a request stands, as the run record tells."""

    PENDING = "pending"
    """No step of it has committed yet (or it was never submitted)."""
    RUNNING = "running"
    """Started; not known to be finished."""
    COMPLETED = "completed"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A decoded run record."""

    fingerprint: str
    status: RunStatus
    result: JSON = None
    reason: JSON = None
    finished_at: float | None = None
    """Epoch seconds the outcome was recorded (garbage collection ages by it)."""

    def to_json(self) -> dict[str, JSON]:
        record: dict[str, JSON] = {"fp": self.fingerprint, "status": self.status.value}
        if self.finished_at is not None:
            record["at"] = self.finished_at
        if self.status is RunStatus.COMPLETED:
            record["result"] = self.result
        elif self.status is RunStatus.ABORTED:
            record["reason"] = self.reason
        return record

    @classmethod
    def from_json(cls, value: Any) -> RunRecord:
        return cls(
            fingerprint=str(value["fp"]),
            status=RunStatus(value["status"]),
            result=value.get("result"),
            reason=value.get("reason"),
            finished_at=value.get("at"),
        )


def memo(identity: str, value: JSON) -> dict[str, JSON]:
    """The memo of a committed step."""
    return {"id": identity, "v": value}


def abort_memo(identity: str, reason: JSON) -> dict[str, JSON]:
    """The memo of a step that aborted the workflow."""
    return {"id": identity, "abort": reason}
