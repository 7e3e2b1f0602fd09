"""The engine's store calls under one step's deadline: reads and commits, resent or named.

A step has a deadline (:attr:`~idemflow.core.policy.RetryPolicy.deadline` from
when it begins); every call the step makes, and every resend of one, stops
retrying there. This part owns that deadline and the two decisions every
call needs: whether a transient error resends the same request (reads, and
commits that would otherwise call out again) or goes back to the caller
(a step's own commit, which reruns its body), and which step a store's
limit refusal names.
"""

from __future__ import annotations

import time

from idemflow import telemetry
from idemflow.core.policy import resent
from idemflow.core.requests import Commit, Read, Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.given import Given
from idemflow.errors import LimitExceededError, TransientError
from idemflow.stores.base import CommitOutcome, Op, Row, RowRef


class StoreCalls:
    """Reads and commits of one execution, resent until the current step's deadline."""

    __slots__ = ("_cursor", "_deadline", "_given", "until")

    def __init__(self, given: Given, cursor: Cursor) -> None:
        self._given = given
        self._cursor = cursor
        self._deadline = given.policy.deadline
        self.until = time.monotonic() + self._deadline
        """When the current step (or the outcome's write) stops retrying: ``time.monotonic()``."""

    def renew(self) -> None:
        """A new step (or the outcome's write) begins: its own deadline from now (as
        :meth:`~idemflow.core.policy.RetryPolicy.until` computes it, without the call)."""
        self.until = time.monotonic() + self._deadline

    def read(self, ref: RowRef) -> Steps[Row | None]:
        """One strongly consistent read, resent on transient errors until the deadline."""
        request = Read(ref)
        try:
            row: Row | None = yield request
        except TransientError:
            row = yield from resent(self._given.policy.resending(self.until), request)
        return row

    def commit(self, ops: list[Op], where: RowRef, *, resend: bool = True) -> Steps[CommitOutcome]:
        """Send. A step's own commit is not resent (``resend=False``): its transient error reruns
        the body, which re-reads what a concurrent commit (DynamoDB's ``TransactionConflict``) most
        likely changed, and meets the memo if the send did apply. The store checks its limits
        before it writes anything; its refusal is raised naming the step."""
        given = self._given
        try:
            if given.traced:
                with telemetry.span(
                    "idemflow.commit", workflow=given.workflow, request_id=given.request_id, ops=len(ops)
                ):
                    return (yield from self._send(Commit(ops), resend))
            return (yield from self._send(Commit(ops), resend))
        except LimitExceededError as refused:
            raise self.named(refused, where) from None

    def named(self, refused: LimitExceededError, where: RowRef) -> LimitExceededError:
        """A store's limit error, naming the step that made the commit."""
        given = self._given
        place = (
            f"step {self._cursor.step} of workflow {given.workflow!r} request {given.request_id!r} on "
            f"{where.table}/{where.partition}"
        )
        return LimitExceededError(place, refused.problem)

    def _send(self, request: Commit, resend: bool) -> Steps[CommitOutcome]:
        if not resend:
            first: CommitOutcome = yield request
            return first
        try:
            outcome: CommitOutcome = yield request
        except TransientError:
            # The commit may have been applied with its answer lost: resending
            # the same operations meets the memo and resolves to it.
            outcome = yield from resent(self._given.policy.resending(self.until), request)
        return outcome
