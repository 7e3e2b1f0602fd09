"""What a request publishes while it runs, as its rows hold it: events and stream values.

Row kinds of their own (format 6), written by the request's own steps (``set_event``,
``write_stream``, ``close_stream``) in the same commit as each step's memo, beside its run record,
and read by anyone outside (``get_event``, ``read_stream``, ``runs show``);
:mod:`idemflow.records` re-exports them with the other rows.

>>> Event("shipped", 3, 1_800_000_000.0).to_json()
{'v': 'shipped', 'n': 3, 'at': 1800000000.0}
>>> StreamEnd.from_json({"len": 2, "n": 5, "at": 1.0})
StreamEnd(length=2, step=5, at=1.0)

Each row's text is built from its parts (:func:`event_text`, :func:`item_text`,
:func:`end_text`): the value was encoded once, when the step was made (a value the codecs refuse
is refused there, before anything is written), and the envelope is the library's own numbers, so a
write encodes nothing twice. The text is exactly ``encode(row.to_json())``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idemflow.serialization import JSON


def _seconds(at: float) -> str:
    """A float as canonical JSON spells it (``float.__repr__``, as :mod:`json` does)."""
    return float.__repr__(float(at))


def event_text(value_text: str, step: int, at: float) -> str:
    """The text of an :class:`Event` row, ``value_text`` being its value's encoded text.

    >>> from idemflow.serialization import encode
    >>> event_text(encode({"a": 1}), 3, 1.5) == encode(Event({"a": 1}, 3, 1.5).to_json())
    True
    """
    return '{"at":' + _seconds(at) + ',"n":' + str(int(step)) + ',"v":' + value_text + "}"


def item_text(value_text: str, step: int) -> str:
    """The text of a :class:`StreamItem` row.

    >>> item_text('"x"', 4)
    '{"n":4,"v":"x"}'
    """
    return '{"n":' + str(int(step)) + ',"v":' + value_text + "}"


def end_text(length: int, step: int, at: float) -> str:
    """The text of a :class:`StreamEnd` row.

    >>> end_text(2, 5, 1.0)
    '{"at":1.0,"len":2,"n":5}'
    """
    return '{"at":' + _seconds(at) + ',"len":' + str(int(length)) + ',"n":' + str(int(step)) + "}"


@dataclass(frozen=True, slots=True)
class Event:
    """The value of one event of a request (``set_event``): a later step of the same key
    overwrites it (last write wins), so ``step`` is the step that set what it holds now."""

    value: JSON
    step: int
    at: float
    """When that step committed it (epoch seconds, the workflow's clock)."""

    def to_json(self) -> dict[str, JSON]:
        return {"v": self.value, "n": self.step, "at": self.at}

    @classmethod
    def from_json(cls, raw: Any) -> Event:
        return cls(raw.get("v"), int(raw["n"]), float(raw["at"]))


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One value of a stream (``write_stream``); its offset is in its row's key."""

    value: JSON
    step: int

    def to_json(self) -> dict[str, JSON]:
        return {"v": self.value, "n": self.step}

    @classmethod
    def from_json(cls, raw: Any) -> StreamItem:
        return cls(raw.get("v"), int(raw["n"]))


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Where ``close_stream`` ended a stream: after ``length`` values (offsets ``0 .. length-1``).

    A stream whose request finished (completed or aborted) without it is over all the same:
    readers stop at its last value.
    """

    length: int
    step: int
    at: float

    def to_json(self) -> dict[str, JSON]:
        return {"len": self.length, "n": self.step, "at": self.at}

    @classmethod
    def from_json(cls, raw: Any) -> StreamEnd:
        return cls(int(raw["len"]), int(raw["n"]), float(raw["at"]))
