"""Branches side by side: the computations of an ``all_of`` or ``any_of`` driven together.

Each branch is an ordinary step computation (an effect's, a wait's, a receive's), written for a
workflow that does one thing at a time. This part runs several of them as one computation: it
resumes a branch until it asks for its outside call or a wait it sits out (a
:class:`~idemflow.core.requests.CallOut` or a :class:`~idemflow.core.requests.Sleep`), launches
that request (:class:`~idemflow.core.requests.Launch`: the driver starts it and answers at once)
and goes on with the next branch; once every branch is in the air it collects the first to land
and resumes its branch with the answer. Store requests pass through to the driver one at a time,
as any step's do, and so do the backoffs between their tries
(:class:`~idemflow.core.requests.Backoff`), so the branches' reads and commits never overlap and a
store's hiccup in one branch never lets another end first: only what waits on the outside world
does.

The branches share the execution's parts, and a step's parts hold what the step they are at has
seen (the cursor's step number, identity and retry policy; the stepper's answer of the call;
the deadline of its store calls). So each branch keeps its own copy of those while another
moves (:class:`~idemflow.engine.cursor.Position`, :meth:`~idemflow.engine.stepper.Stepper.aside`)
and is put back where it stood before it is resumed; it also runs in a ``contextvars`` context
of its own, so a span it opens is its own. What is true of the request (the run record known,
steps committed) stays shared.

How the branches end is for :mod:`idemflow.engine.together` to read: a value, an error (an
``Exception``, an abort, a cancel, a suspension for a worker, a lost ``any_of``), or not at all (an
``any_of`` decided first). Anything else a branch raises (the process dying, the request found
finished, another version met) ends them all at once.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from collections.abc import Sequence
from typing import Any

from idemflow.core.plan import Cancelled, Suspended
from idemflow.core.requests import Abandon, CallOut, Collect, Launch, Skipped, Sleep, Steps
from idemflow.engine.attempt import NOT_CALLED
from idemflow.engine.cursor import Cursor, Position
from idemflow.engine.decision import Preempted
from idemflow.engine.memo_reader import AbortWorkflow
from idemflow.engine.stepper import Stepper
from idemflow.engine.store_calls import StoreCalls

ENDS = (Exception, AbortWorkflow, Cancelled, Preempted, Suspended, Skipped)
"""What a branch may end with, for its group to read; anything else ends every branch."""


class Branch:
    """One branch: its computation, where it stands, and how it ended."""

    __slots__ = ("computation", "context", "ended", "error", "index", "kept", "position", "until", "value")

    def __init__(self, index: int, computation: Steps[Any], position: Position, until: float) -> None:
        self.index = index
        self.computation = computation
        self.context = contextvars.copy_context()
        self.position = position
        """Where the cursor stands for this branch (its step, identity, policy, replay, decision)."""
        self.kept: tuple[Any, int] = (NOT_CALLED, 0)
        """What the stepper has seen of this branch's step (:meth:`Stepper.aside`)."""
        self.until = until
        """Its step's deadline for store calls."""
        self.ended = False
        self.value: Any = None
        self.error: BaseException | None = None

    def called(self) -> bool:
        """Whether this branch's outside call answered: what follows it is its memo's commit."""
        return self.kept[0] is not NOT_CALLED


class Branches:
    """The branches of one ``all_of`` or ``any_of``, over the execution's shared parts."""

    __slots__ = ("_calls", "_cursor", "_stepper")

    def __init__(self, cursor: Cursor, stepper: Stepper, calls: StoreCalls) -> None:
        self._cursor = cursor
        self._stepper = stepper
        self._calls = calls

    def run(
        self,
        computations: Sequence[tuple[Steps[Any], Position]],
        *,
        first: bool,
        last: frozenset[int] = frozenset(),
    ) -> Steps[tuple[list[Branch], Branch | None]]:
        """Run ``computations`` side by side, each from its position: the branches as they ended
        and the one whose end stopped them, if any. The branches in ``last`` (an ``any_of``'s
        timers) take their first turn after every other's.

        Without ``first`` (``all_of``) every branch runs to its end; once one failed, aborted or
        found the request cancelled,
        no branch makes a call it has not made yet (it is thrown :class:`Skipped` instead,
        which gives back what it took) and the waits in the air are let go, but the calls in
        the air are waited for and committed. With ``first`` (``any_of``), the first branch to
        end with a value, an error or a loss stops them all: the rest are abandoned in the air
        and closed where they stand.
        """
        until = self._calls.until
        branches = [
            Branch(index, computation, position, until)
            for index, (computation, position) in enumerate(computations)
        ]
        flying: dict[Any, tuple[Branch, CallOut | Sleep]] = {}
        pending: deque[tuple[Branch, Any, BaseException | None]] = deque(
            (branch, None, None) for branch in sorted(branches, key=lambda branch: branch.index in last)
        )
        stopper: Branch | None = None
        try:
            while True:
                while pending and not (first and stopper is not None):
                    branch, value, error = pending.popleft()
                    meetings = self._cursor.meetings
                    request = yield from self._advance(branch, value, error)
                    if self._cursor.meetings != meetings:  # it met another execution's run
                        _replay(branches)  # record: every branch reads its memo before it acts
                    if request is not None:
                        if stopper is not None and not branch.called():  # all_of failed: not made
                            pending.appendleft((branch, None, Skipped()))
                        else:
                            flying[(yield Launch(request))] = (branch, request)
                    elif stopper is None and _stops(branch, first):
                        stopper = branch
                        if not first:  # the waits in the air are let go; the calls are waited for
                            waits = [f for f, (held, _) in flying.items() if not held.called()]
                            waits = [f for f in waits if type(flying[f][1]) is Sleep]
                            if waits:
                                yield Abandon(tuple(waits))
                                pending.extend((flying.pop(f)[0], None, Skipped()) for f in waits)
                if (first and stopper is not None) or not flying:
                    break
                for flight, landed in (yield Collect(tuple(flying))):
                    pending.append((flying.pop(flight)[0], landed.value, landed.error))
            if flying:
                yield Abandon(tuple(flying))
                flying.clear()
            return branches, stopper
        except GeneratorExit:
            raise
        except BaseException:
            if flying:
                yield from _let_go(tuple(flying))
            raise
        finally:
            self._close(branches)

    def _advance(
        self, branch: Branch, value: Any, error: BaseException | None
    ) -> Steps[CallOut | Sleep | None]:
        """Resume ``branch`` with its answer until it asks for a call or a wait (returned) or ends;
        its store requests go to the driver, their answers (or errors) back to it."""
        cursor, stepper, calls = self._cursor, self._stepper, self._calls
        while True:
            cursor.stand(branch.position)
            stepper.back(branch.kept)
            calls.until = branch.until
            try:
                if error is None:
                    request = branch.context.run(branch.computation.send, value)
                else:
                    request = branch.context.run(branch.computation.throw, error)
            except StopIteration as stop:
                branch.ended, branch.value = True, stop.value
                return None
            except ENDS as ended:
                branch.ended, branch.error = True, ended
                return None
            finally:
                branch.position, branch.kept, branch.until = cursor.position(), stepper.aside(), calls.until
            if type(request) is CallOut or type(request) is Sleep:
                return request
            try:
                value, error = (yield request), None
            except GeneratorExit:
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown back into the branch that asked
                value, error = None, exc

    def _close(self, branches: list[Branch]) -> None:
        """Close the branches that did not end, each where it stands (its finally blocks run)."""
        cursor, stepper, calls = self._cursor, self._stepper, self._calls
        for branch in branches:
            if branch.ended:
                continue
            cursor.stand(branch.position)
            stepper.back(branch.kept)
            calls.until = branch.until
            with contextlib.suppress(Exception):  # it is left: nothing it says changes the outcome
                branch.context.run(branch.computation.close)


def _stops(branch: Branch, first: bool) -> bool:
    """Whether ``branch``'s end stops the others: any end but a suspension (or a skip) under
    ``first``; a failure, an abort or a cancel otherwise."""
    if first:
        return not isinstance(branch.error, Suspended | Skipped)
    return isinstance(branch.error, Exception | AbortWorkflow | Cancelled)


def _replay(branches: list[Branch]) -> None:
    """From now on each branch reads its step's memo before running it (the request ran before)."""
    for branch in branches:
        if not branch.ended:
            branch.position = branch.position._replace(replaying=True)


def _let_go(flights: tuple[Any, ...]) -> Steps[None]:
    """Abandon ``flights`` on the way out of an error, if the driver still answers."""
    try:
        yield Abandon(flights)
    except GeneratorExit:
        raise
    except BaseException:  # noqa: BLE001 - the error on the way out is the one that counts
        pass


__all__ = ["Branch", "Branches"]
