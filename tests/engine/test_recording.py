"""The run record's part: claim the request id, meet another execution's record, adopt one."""

from __future__ import annotations

import pytest

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.core.plan import Finished, OtherVersion, Plan, Submission
from idemflow.errors import IdempotencyKeyReuseError
from idemflow.records import OutboxEntry, outbox_ref, run_ref
from idemflow.stores.base import Insert, Put
from tests.support.engine_rows import ONE_PARTITION, Parts, Rows, given

RUN = run_ref("wf", "r1")


def _record(fingerprint: str = "fp", *, status: RunStatus = RunStatus.RUNNING, version: int = 1) -> RunRecord:
    return RunRecord(fingerprint, status, version=version, started_at=500.0)


def test_a_claim_inserts_the_record_with_the_fingerprint_and_makes_it_known() -> None:
    rows, parts = Rows(), Parts(given(clock=lambda: 900.0))
    rows.run(parts.recorder.claim())
    [commit] = rows.commits()
    assert [type(op) for op in commit] == [Insert]
    stored = RunRecord.from_json(rows.rows[RUN][0])
    assert (stored.fingerprint, stored.status, stored.started_at) == ("fp", RunStatus.RUNNING, 900.0)
    assert (parts.cursor.run_known, parts.cursor.replaying) == (True, False)
    assert parts.recorder.claimed_at() == 900.0


def test_a_claim_that_meets_another_executions_record_replays_from_its_claim() -> None:
    rows, parts = Rows(), Parts(given(clock=lambda: 900.0))
    rows.put(RUN, _record().to_json())
    rows.run(parts.recorder.claim())
    assert (parts.cursor.run_known, parts.cursor.replaying) == (True, True)
    assert parts.recorder.claimed_at() == 500.0  # the claim that won, not this attempt's


def test_a_record_of_another_input_is_refused_and_an_alias_is_not() -> None:
    rows, parts = Rows(), Parts(given())
    rows.put(RUN, _record("other").to_json())
    with pytest.raises(IdempotencyKeyReuseError):
        rows.run(parts.recorder.meet(rows.row(RUN)))
    assert not parts.cursor.replaying
    aliased = Parts(given(aliases=("other",)))
    rows.run(aliased.recorder.meet(rows.row(RUN)))
    assert aliased.cursor.replaying


def test_a_finished_record_is_the_answer() -> None:
    rows, parts = Rows(), Parts(given())
    done = _record().finished(RunStatus.COMPLETED, 600.0, result=3)
    rows.put(RUN, done.to_json())
    with pytest.raises(Finished) as finished:
        rows.run(parts.recorder.meet(rows.row(RUN)))
    assert finished.value.record.result == 3


def test_a_request_started_on_another_version_stops_before_anything_runs() -> None:
    rows, parts = Rows(), Parts(given(Plan(version=1)))
    rows.put(RUN, _record(version=2).to_json())
    with pytest.raises(OtherVersion):
        rows.run(parts.recorder.meet(rows.row(RUN)))
    assert not parts.cursor.replaying


def test_where_a_commit_stays_in_one_partition_a_submissions_outbox_entry_goes_first() -> None:
    entry = OutboxEntry("wf", 1, "r1", 0.0)
    plan = Plan(submission=Submission({"args": [1], "kwargs": {}}, entry))
    rows, parts = Rows(), Parts(given(plan, capabilities=ONE_PARTITION))
    rows.run(parts.recorder.claim())
    first, second = rows.commits()
    assert [op.ref for op in first] == [outbox_ref("wf", "r1")]
    assert [op.ref for op in second] == [RUN]
    assert RunRecord.from_json(rows.rows[RUN][0]).input == {"args": [1], "kwargs": {}}


def test_a_submission_adopts_a_request_run_claimed_and_owns_its_continuation() -> None:
    entry = OutboxEntry("wf", 1, "r1", 0.0)
    plan = Plan(submission=Submission({"args": [], "kwargs": {}}, entry))
    rows, parts = Rows(), Parts(given(plan))
    rows.put(RUN, _record().to_json())  # claimed by run: no input stored
    rows.run(parts.recorder.meet(rows.row(RUN)))
    [adoption] = rows.commits()
    assert [type(op) for op in adoption] == [Put, Put]
    assert RunRecord.from_json(rows.rows[RUN][0]).input == {"args": [], "kwargs": {}}
    assert (parts.recorder.adopted, parts.recorder.copy, parts.cursor.replaying) == (True, False, True)


def test_a_second_submission_of_a_submitted_request_is_a_copy() -> None:
    entry = OutboxEntry("wf", 1, "r1", 0.0)
    plan = Plan(submission=Submission({"args": [], "kwargs": {}}, entry))
    rows, parts = Rows(), Parts(given(plan))
    rows.put(RUN, RunRecord("fp", RunStatus.RUNNING, input={"args": [], "kwargs": {}}).to_json())
    rows.run(parts.recorder.meet(rows.row(RUN)))
    assert (parts.recorder.copy, rows.commits()) == (True, [])
