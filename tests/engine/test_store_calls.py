"""The store calls under a step's deadline: what is resent, what goes back, what a refusal names."""

from __future__ import annotations

import pytest

from idemflow.core.requests import Commit, Read
from idemflow.errors import LimitExceededError, TransientError
from idemflow.stores.base import Committed, Insert, RowRef
from tests.support.engine_rows import Parts, Rows, given

REF = RowRef("items", "p1", "k")


def test_a_read_that_met_a_transient_error_is_resent_and_answered() -> None:
    rows, parts = Rows(), Parts(given())
    rows.put(REF, 7)
    rows.fail_next(Read, TransientError("throttled"))
    row = rows.run(parts.calls.read(REF))
    assert row is not None and row.value == 7
    assert [type(asked) for asked in rows.asked if type(asked) is Read] == [Read, Read]


def test_a_commit_is_resent_unless_a_rerun_of_its_step_is_the_retry() -> None:
    rows, parts = Rows(), Parts(given())
    insert = Insert(REF, 1, "1")
    rows.fail_next(Commit, TransientError("no answer"))
    assert isinstance(rows.run(parts.calls.commit([insert], REF)), Committed)
    assert rows.rows[REF][0] == 1
    rows.fail_next(Commit, TransientError("no answer"))
    with pytest.raises(TransientError):
        rows.run(parts.calls.commit([Insert(RowRef("items", "p1", "j"), 2, "2")], REF, resend=False))


def test_a_limit_refusal_names_the_step_and_where_it_wrote() -> None:
    rows, parts = Rows(), Parts(given(workflow="pay", request_id="r9"))
    parts.cursor.advance()
    parts.cursor.advance()
    rows.fail_next(Commit, LimitExceededError("a commit", "101 operations; the backend allows 100"))
    with pytest.raises(LimitExceededError) as refused:
        rows.run(parts.calls.commit([Insert(REF, 1, "1")], REF))
    assert refused.value.where == "step 2 of workflow 'pay' request 'r9' on items/p1"
    assert refused.value.problem == "101 operations; the backend allows 100"


def test_each_step_gets_a_deadline_of_its_own() -> None:
    parts = Parts(given())
    first = parts.calls.until
    parts.calls.renew()
    assert parts.calls.until >= first
