"""Where one execution stands: the step it is at, and what it has learnt about its request.

Every part of the engine reads the cursor; it changes only through the
methods below, so there is one place where a step number is taken
(:meth:`Cursor.advance`) and one where each of the request's facts is learnt
(:meth:`Cursor.met`, :meth:`Cursor.committed`). A step number names its memo,
so a number taken twice, or skipped, is a replay that meets another step's
memo: that is why no part counts steps on its own.

>>> cursor = Cursor(resume=False)
>>> cursor.advance(), cursor.advance()
(1, 2)
>>> cursor.met(); (cursor.run_known, cursor.replaying)
(True, True)
"""

from __future__ import annotations

from typing import NamedTuple

from idemflow.core.step_retry import StepRetry
from idemflow.engine.decision import Decision


class Position(NamedTuple):
    """Where one branch of an ``all_of`` or ``any_of`` stands: what the cursor holds of the step
    it is at, kept while the other branches move (:mod:`idemflow.engine.branches`)."""

    step: int
    identity: str
    retry: StepRetry | None
    replaying: bool
    deciding: Decision | None


class Cursor:
    """The step number and the request's state as this execution knows it."""

    __slots__ = (
        "after_waits",
        "cleaning",
        "commits",
        "deciding",
        "identity",
        "meetings",
        "replaying",
        "retry",
        "run_known",
        "step",
    )

    def __init__(self, resume: bool) -> None:
        self.step = 0
        """Number of the last step begun (a compensation or retry is at its step's number)."""
        self.identity = ""
        """What the step now running is called (``atomic debit``): its memo holds it."""
        self.retry: StepRetry | None = None
        """The policy of the step now running (its own, else the workflow's): a worker's next
        attempt follows it (:class:`~idemflow.errors.StepFailedError` carries it)."""
        self.run_known = resume
        """The run record exists (this execution claimed it, or met it): no claim rides along."""
        self.replaying = resume
        """Read each step's memo before running it: the request ran before, up to a step."""
        self.commits = 0
        """Steps this execution committed: none means the outcome is an earlier execution's."""
        self.cleaning = False
        """Running ``on_abort`` steps: an operator's abort does not replace them."""
        self.after_waits: list[int] | None = None
        """The numbers after the timers this execution passed whose place no step's memo took
        (the workflow ended after the wait, or went on with steps that write none): an abort
        meeting the timer writes its memo there, so the request's completion takes each place
        with a memo of its own (:data:`~idemflow.engine.memo_reader.WAIT_ENDED`), and only one stands."""
        self.meetings = 0
        """How often this execution met another's run record (the branches of an ``all_of`` then
        read their memos first, whichever met it)."""
        self.deciding: Decision | None = None
        """The ``any_of`` decision the step of a branch commits with, if it is one's
        (:mod:`idemflow.engine.decision`)."""

    def advance(self) -> int:
        """Begin the next forward step: its number (the only place a step number is taken)."""
        self.step += 1
        return self.step

    def waited(self) -> None:
        """A timer ended: the place of the step after it is open until a step's memo takes it."""
        if self.after_waits is None:
            self.after_waits = []
        self.after_waits.append(self.step + 1)

    def took(self) -> None:
        """The current step's memo takes its place: a wait before it left that place open, if any."""
        opened = self.after_waits
        if opened and self.step in opened:
            opened.remove(self.step)

    def revisit(self, step: int) -> None:
        """Stand at ``step`` again: its compensation, another attempt at it, ``on_abort`` after it."""
        self.step = step

    def known(self) -> None:
        """The run record exists (this execution's claim committed)."""
        self.run_known = True

    def met(self) -> None:
        """Another execution's run record was met: from here each step reads its memo first."""
        self.run_known = True
        self.replaying = True
        self.meetings += 1

    def fresh(self) -> None:
        """A memo was missing: memos are sequential, so none after it; run bodies from here."""
        self.replaying = False

    def committed(self) -> None:
        """A step of this execution committed (with the run record, if it was not known)."""
        self.run_known = True
        self.commits += 1

    def position(self) -> Position:
        """Where the current branch stands, to come back to (:meth:`stand`)."""
        return Position(self.step, self.identity, self.retry, self.replaying, self.deciding)

    def stand(self, position: Position) -> None:
        """Stand where a branch stood (or where a group of branches ends)."""
        self.step, self.identity, self.retry, self.replaying, self.deciding = position

    def restart(self) -> None:
        """Back to the workflow's start, replaying whatever is committed (see ``Restart``)."""
        self.replaying = self.replaying or self.run_known
        self.step, self.identity, self.retry, self.cleaning = 0, "", None, False
        self.after_waits, self.deciding = None, None
