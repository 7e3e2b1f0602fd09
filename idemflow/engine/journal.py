"""The journal of forward steps: what a continuation carries, and what a resumed run is held to.

``submit`` stops at the first checkpoint and hands the rest to a worker; the
continuation carries the steps taken so far as ``(table, partition,
identity)``, and the worker's execution checks each step it reaches against
them (``Plan.expected``), so a step the code moved to another table or
partition is caught as non-determinism before it runs, not after it wrote.
This part keeps that list and makes that check; nothing else journals. It also keeps, in
every execution, the places ``(table, partition)`` of the atomic steps it met, and the highest
step number it reached: the completion record names them (:mod:`idemflow.core.places`), so the
request's steps are listed without its code.
"""

from __future__ import annotations

from collections.abc import Sequence

from idemflow.core.places import Place, Places
from idemflow.core.plan import AtCheckpoint, JournalEntry
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.errors import NonDeterminismError


class Journal:
    """The forward steps of an execution, journaled where a continuation needs them, checked
    where a resumed execution has them."""

    __slots__ = ("_cursor", "_entries", "_given", "_places", "_reached", "_through", "noting")

    def __init__(self, given: Given, cursor: Cursor) -> None:
        self._given = given
        self._cursor = cursor
        plan = given.plan
        self._entries: list[JournalEntry] | None = [] if plan.at_checkpoint is AtCheckpoint.STOP else None
        self.noting = self._entries is not None or bool(plan.expected)
        """Whether steps are noted at all (the hot path of ``run`` asks only this)."""
        self._through = 0
        """The last step of the ``all_of`` or ``any_of`` journaled last (:meth:`block`)."""
        self._places: dict[Place, None] = {}
        """Where the atomic steps met so far keep their memos, in the order first met."""
        self._reached = 0
        """The highest number of an atomic step met (the others' memos are beside the record)."""

    def entries(self) -> tuple[JournalEntry, ...]:
        """The forward steps so far, for a continuation to check its replay against."""
        return tuple(self._entries or ())

    def restart(self) -> None:
        """Start over (see :class:`~idemflow.engine.deferred.Restart`): nothing journaled."""
        if self._entries is not None:
            self._entries = []
        self._through = 0
        self._places = {}
        self._reached = 0

    def placed(self, table: str, partition: str, step: int) -> None:
        """The atomic step ``step`` keeps its memo in ``table``'s ``partition``."""
        self._places[table, partition] = None
        if step > self._reached:
            self._reached = step

    def places(self) -> Places | None:
        """The places met so far and the highest atomic step, for a record to name (None: no
        atomic step met, so the record names none, as before places were kept)."""
        return Places.of(self._places, self._reached) if self._places else None

    def note(self, table: str, partition: str, identity: str) -> None:
        """Journal the current forward step, or check it against a resumed execution's
        (``("", "", "uuid4")`` for a derived value's step: no memo, but a number of its own)."""
        step = self._cursor.step
        if self._entries is not None and step > self._through:  # else journaled with its group
            self._entries.append((table, partition, identity))
        self._check(step, table, partition, identity)

    def block(self, first: int, entries: Sequence[JournalEntry]) -> None:
        """Journal (and check) the steps of an ``all_of`` or ``any_of``, numbered from ``first``,
        in their order, whatever order its branches reach them in."""
        for offset, (table, partition, identity) in enumerate(entries):
            if self._entries is not None:
                self._entries.append((table, partition, identity))
            self._check(first + offset, table, partition, identity)
        self._through = first + len(entries) - 1

    def _check(self, step: int, table: str, partition: str, identity: str) -> None:
        given = self._given
        expected = given.plan.expected
        if step <= len(expected) and expected[step - 1] != (table, partition, identity):
            recorded = "{2} on {0}/{1}".format(*expected[step - 1])
            met = f"{identity} on {table}/{partition}"
            raise NonDeterminismError(given.workflow, given.request_id, step, repr(recorded), repr(met))
