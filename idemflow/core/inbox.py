"""A message sent to a request (``send``), as the row of its inbox holds it until a ``receive``
takes it.

A row kind of its own, written by a sender and read by the receiving request's coordinator, with
its own revision history (format 3); :mod:`idemflow.records` re-exports it with the other rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from idemflow.serialization import JSON


@dataclass(frozen=True, slots=True)
class Message:
    """A message sent to a request (``send``), until a ``receive`` consumes it.

    ``sender`` names the sending step (workflow, request, step) and ``seq`` its step number, so
    one sender's messages are received in the order sent; ``at`` (the sender's clock) orders
    the first messages of different senders.
    """

    value: JSON
    sender: str
    seq: int
    at: float
    taken: bool = False
    """Taken by a ``receive``: the row stays (without its value) until the request's rows are
    collected, so a sender resending its step meets it instead of sending the message again."""

    def to_json(self) -> dict[str, JSON]:
        row: dict[str, JSON] = {"v": self.value, "s": self.sender, "n": self.seq, "at": self.at}
        if self.taken:
            row["taken"] = True
        return row

    @classmethod
    def from_json(cls, raw: Any) -> Message:
        return cls(raw.get("v"), str(raw["s"]), int(raw["n"]), float(raw["at"]), bool(raw.get("taken")))

    def as_taken(self) -> Message:
        """This message's row once a ``receive`` took it."""
        return replace(self, value=None, taken=True)
