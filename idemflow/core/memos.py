"""A step's memo as a row: its fields, the text every step writes it as, and the incarnation
that tells whose run wrote it.

Every step commits a memo, so its encoding is on the hot path and has a module of its own, beside
the other row formats of :mod:`idemflow.records` (which re-exports every name here, and whose
:data:`~idemflow.records.FORMAT` counts this row's revisions too).

A memo is ``{"id": identity, "v": result}`` for a committed step, or
``{"id": identity, "abort": reason}`` for a step that aborted the workflow, with ``t`` (when it
committed, epoch milliseconds) and ``i`` (its run's incarnation) when known.

>>> Memo.from_json({"id": "atomic debit", "v": 5})
Memo(identity='atomic debit', value=5, aborted=False, at=None, run=None)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idemflow.core.row import Row
from idemflow.serialization import JSON, encode

MEMO_AT = 0
"""Position of the memo insert in a step's commit (its failure carries the existing memo)."""
RUN_AT = 1
"""Position of the run-record insert when it rides in a step's commit."""


@dataclass(frozen=True, slots=True)
class Memo:
    """A step's memo: its identity and result, or the abort it decided."""

    identity: str
    value: JSON
    aborted: bool = False
    at: float | None = None
    """When the step committed (epoch seconds; absent before format 4, which writes milliseconds)."""
    run: str | None = None
    """The incarnation of the run that wrote it (absent before format 5)."""

    def to_json(self) -> dict[str, JSON]:
        at = None if self.at is None else round(self.at * 1000)
        return memo_row(self.identity, self.value, aborted=self.aborted, at=at, run=self.run)

    @classmethod
    def from_json(cls, raw: Any) -> Memo | None:
        """The memo a row holds, or None if it is not one (so a replay reports non-determinism)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            return None
        at = raw.get("t")
        at = at / 1000 if type(at) is int else None  # milliseconds: an int is cheaper to write
        run = raw.get("i")
        run = run if isinstance(run, str) else None
        if "abort" in raw:
            return cls(raw["id"], raw["abort"], aborted=True, at=at, run=run)
        return cls(raw["id"], raw.get("v"), at=at, run=run)


def memo_row(
    identity: str, value: JSON, *, aborted: bool = False, at: int | None = None, run: str | None = None
) -> dict[str, JSON]:
    """``Memo(identity, value, aborted, at, run).to_json()`` without building the Memo: every step
    writes one (``at`` in epoch milliseconds)."""
    row: dict[str, JSON] = {"id": identity, "abort": value} if aborted else {"id": identity, "v": value}
    if at is not None:
        row["t"] = at
    if run is not None:
        row["i"] = run
    return row


_quoted: Callable[[str], str] = json.encoder.encode_basestring
"""The JSON text of a str, as the encoder writes one (``encode(identity)`` of an ASCII identity,
without the walk that looks for what JSON lacks: a str has nothing to look for)."""
_EXACT_INT = 2**53
"""Ints inside ±2**53 are written as ``str`` writes them, which is what the JSON encoder does."""


def memo_text(
    identity: str, value: JSON, *, aborted: bool = False, at: int | None = None, run: str | None = None
) -> str:
    """``encode(memo_row(...), envelope=1)``, the text every step's memo is written as, built from
    its parts: the envelope is the library's own (an ASCII name, an int, a hex incarnation), so
    only the step's value needs the full encoding, and its usual answers (None, a bool, a small
    int) none at all. The same text, and the same :class:`~idemflow.errors.InvalidValueError`
    (naming no place: the caller names the step), as the full encoding; a memo whose envelope
    is not that plain is encoded whole.

    >>> memo_text("atomic debit", None, at=1700000000000, run="a1b2")
    '{"i":"a1b2","id":"atomic debit","t":1700000000000,"v":null}'
    """
    if not (identity.isascii() and type(at) is int and (run is None or (run.isascii() and run.isalnum()))):
        return encode(memo_row(identity, value, aborted=aborted, at=at, run=run), "", envelope=1)
    if value is None:
        text = "null"
    elif value is True or value is False:
        text = "true" if value else "false"
    elif type(value) is int and -_EXACT_INT < value < _EXACT_INT:
        text = str(value)
    else:
        text = encode(value, "")
    head = "{" if run is None else '{"i":"' + run + '",'
    if aborted:
        head = '{"abort":' + text + "," + head[1:]
    body = head + '"id":' + _quoted(identity) + ',"t":' + str(at)
    return body + "}" if aborted else body + ',"v":' + text + "}"


def new_incarnation() -> str:
    """A fresh run's incarnation: what tells its memos from those of an earlier request that had
    the same id.

    A run record may go before its memos: DynamoDB's TTL deletes in no order, within about two
    days of expiry, and a store's sweep visits rows in key order. A later request reusing the id
    then claims a new record, and without incarnations it would replay the old memos (a partial
    run). 48 random bits: two runs of one request id drawing the same is not a practical risk.
    """
    return os.urandom(6).hex()  # secrets.token_hex(6), without its two calls on the way


RENEWED = "g"
"""What separates an incarnation's random part from its number when the request continued as new
(``continue_as_new``, format 7): the random part is hex, which never holds it."""


def renewed_incarnation(number: int) -> str:
    """The incarnation of a request's ``number``-th incarnation (2 after its first
    ``continue_as_new``): random as :func:`new_incarnation`'s, with the number after
    :data:`RENEWED`, so a memo tells how far along the request its writer was without a read.

    >>> renewed_incarnation(3)[-2:], incarnation_number(renewed_incarnation(3))
    ('g3', 3)
    """
    return f"{new_incarnation()}{RENEWED}{number}"


def incarnation_number(incarnation: str | None) -> int:
    """Which incarnation of its request ``incarnation`` is: 1 for every run that never continued
    as new (and for a record or memo written before incarnations or before format 7).

    >>> incarnation_number(None), incarnation_number("a1b2c3d4e5f6"), incarnation_number("a1b2g12")
    (1, 1, 12)
    """
    if incarnation is None:
        return 1
    _, sep, number = incarnation.rpartition(RENEWED)
    return int(number) if sep and number.isdigit() and number[0] != "0" else 1


def of_earlier_incarnation(memo: Row, incarnation: str | None) -> bool:
    """Whether ``memo`` was written by an earlier incarnation of this very request (one the
    request left by ``continue_as_new``): it may be replaced in place by this incarnation's memo
    at the same step, whereas a memo of the same number or a later one is judged by the run record
    (a later incarnation's means this execution is behind the request)."""
    if incarnation is None:
        return False
    theirs = memo_run(memo)
    return theirs is not None and incarnation_number(theirs) < incarnation_number(incarnation)


def of_earlier_run(memo: Row, incarnation: str | None) -> bool:
    """Whether ``memo`` belongs to an earlier run of its request id than ``incarnation``'s.

    Only a memo and a run that both carry an incarnation can be told apart: a memo written
    before format 5 (or by an older server during a rolling deploy, which drops the field) may
    be this run's own, so it is trusted, as every memo was before."""
    if incarnation is None:
        return False
    theirs = memo_run(memo)
    return theirs is not None and theirs != incarnation


def memo_run(memo: Row) -> str | None:
    """The incarnation of the run that wrote ``memo`` (None before format 5)."""
    value = memo.value
    theirs = value.get("i") if type(value) is dict else None
    return theirs if isinstance(theirs, str) else None
