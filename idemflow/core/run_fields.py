"""The structured fields a run record holds beside its status: why a request failed
(``fail``), which queued continuation is the one to run (``ct``) and a step's failed attempts
under a worker (``rt``).

Each is a small value with its own row format and rules (a continuation's supersession, an
attempt count per step), used apart from the record by the worklist and the engine, so they live
here and :mod:`idemflow.records` re-exports them with the record that embeds them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from idemflow.serialization import JSON


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a request ended ``failed``: the last error, at which step, after how many attempts.

    ``identity`` names the step as its memo would (``atomic reserve``, ``effect charge``,
    ``compensate effect charge``); None in records of earlier releases, and for a request that
    failed before any step (no worker could run it: step 0)."""

    reason: str
    step: int
    attempts: int
    identity: str | None = None

    def to_json(self) -> dict[str, JSON]:
        shown: dict[str, JSON] = {"reason": self.reason, "step": self.step, "attempts": self.attempts}
        if self.identity is not None:
            shown["identity"] = self.identity
        return shown

    @classmethod
    def from_json(cls, raw: Any) -> Failure:
        identity = raw.get("identity")
        return cls(
            str(raw["reason"]),
            int(raw["step"]),
            int(raw["attempts"]),
            None if identity is None else str(identity),
        )

    def where(self) -> str:
        """The step, as an operator reads it: ``step 2 (atomic reserve)``.

        >>> Failure("ValueError: no stock", 2, 1, "atomic reserve").where()
        'step 2 (atomic reserve)'
        """
        return f"step {self.step}" if self.identity is None else f"step {self.step} ({self.identity})"


@dataclass(frozen=True, slots=True)
class Continuation:
    """Which queued continuation of a waiting request is the one to run.

    A request waiting on a timer has one pointer on the queue; a pointer
    that replays it again (a relay racing a send, a redelivery, a timer
    a message's wake made obsolete) would queue a second one, and both
    would live on for every wait that follows. Each pointer a suspension
    sends carries a continuation, recorded in the run record *after* the
    send: a later generation than the record's is the newest (its write may
    not have landed), an older one, or the same generation from another
    execution, was superseded and is dropped after one read.
    """

    generation: int
    nonce: str

    def to_json(self) -> list[JSON]:
        return [self.generation, self.nonce]

    @classmethod
    def from_json(cls, raw: Any) -> Continuation:
        return cls(int(raw[0]), str(raw[1]))

    @classmethod
    def after(cls, *seen: Continuation | None) -> Continuation:
        """The next continuation of a request whose record or pointer held ``seen``."""
        generation = max((c.generation for c in seen if c is not None), default=0) + 1
        return cls(generation, secrets.token_hex(4))

    def superseded_by(self, recorded: Continuation | None) -> bool:
        """Whether a pointer carrying this one must not run, the record holding ``recorded``."""
        if recorded is None or self.generation > recorded.generation:
            return False
        return self.generation < recorded.generation or self.nonce != recorded.nonce


@dataclass(frozen=True, slots=True)
class Attempts:
    """A step that failed under a worker and is tried again: the run record keeps its count, so
    restarts, redeliveries and duplicate messages neither shorten nor multiply the budget.

    ``identity`` names the step (a compensation is a step of its own); ``first`` is when it
    first failed and ``due`` when the next attempt may start (epoch seconds); ``error`` the
    last one.
    """

    step: int
    identity: str
    count: int
    first: float
    due: float
    error: str

    def to_json(self) -> dict[str, JSON]:
        return {
            "s": self.step,
            "id": self.identity,
            "n": self.count,
            "first": self.first,
            "due": self.due,
            "err": self.error,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Attempts:
        return cls(
            int(raw["s"]),
            str(raw["id"]),
            int(raw["n"]),
            float(raw["first"]),
            float(raw["due"]),
            str(raw["err"]),
        )

    def of(self, step: int, identity: str) -> int:
        """Failed attempts counted for this step so far."""
        return self.count if (self.step, self.identity) == (step, identity) else 0
