"""Which pointer of a waiting request runs: the order the stray check relies on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.records import Continuation

continuations = st.builds(Continuation, st.integers(1, 5), st.sampled_from(["a", "b"]))


@given(continuations, st.none() | continuations)
def test_a_pointer_runs_unless_the_record_holds_a_later_or_another_same_generation(
    pointer: Continuation, recorded: Continuation | None
) -> None:
    superseded = pointer.superseded_by(recorded)
    if recorded is None or pointer == recorded or pointer.generation > recorded.generation:
        assert not superseded  # the recorded one, or one whose write has not landed yet
    else:
        assert superseded


@given(st.lists(st.none() | continuations, max_size=3))
def test_the_next_continuation_supersedes_every_one_it_was_made_after(
    seen: list[Continuation | None],
) -> None:
    following = Continuation.after(*seen)
    assert all(c is None or c.superseded_by(following) for c in seen)
    assert not following.superseded_by(following)


def test_the_run_record_keeps_the_continuation_until_the_request_ends() -> None:
    record = RunRecord("fp", RunStatus.RUNNING, continuation=Continuation(3, "9f"))
    assert RunRecord.from_json(record.to_json()) == record
    assert "ct" not in record.finished(RunStatus.COMPLETED, 1.0, result=1).to_json()
