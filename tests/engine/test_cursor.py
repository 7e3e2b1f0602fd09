"""The cursor: step numbers taken in one place, and what the execution learnt of its request."""

from __future__ import annotations

from idemflow.engine.cursor import Cursor


def test_steps_are_numbered_one_by_one_and_a_revisit_takes_no_number() -> None:
    cursor = Cursor(resume=False)
    assert [cursor.advance(), cursor.advance()] == [1, 2]
    cursor.revisit(1)  # a compensation of step 1
    assert cursor.step == 1
    cursor.revisit(2)
    assert cursor.advance() == 3


def test_a_fresh_execution_knows_nothing_and_a_resumed_one_replays() -> None:
    fresh, resumed = Cursor(resume=False), Cursor(resume=True)
    assert (fresh.run_known, fresh.replaying) == (False, False)
    assert (resumed.run_known, resumed.replaying) == (True, True)


def test_a_commit_makes_the_record_known_and_counts() -> None:
    cursor = Cursor(resume=False)
    cursor.committed()
    cursor.committed()
    assert (cursor.run_known, cursor.replaying, cursor.commits) == (True, False, 2)


def test_a_restart_replays_what_this_execution_committed_from_step_zero() -> None:
    cursor = Cursor(resume=False)
    cursor.advance()
    cursor.committed()
    cursor.identity, cursor.cleaning = "atomic a", True
    cursor.restart()
    assert (cursor.step, cursor.identity, cursor.cleaning) == (0, "", False)
    assert cursor.replaying  # its own commits are memos now
    assert cursor.commits == 1  # they were still made by this execution


def test_a_restart_before_anything_was_committed_runs_fresh() -> None:
    cursor = Cursor(resume=False)
    cursor.advance()
    cursor.restart()
    assert (cursor.step, cursor.replaying) == (0, False)


def test_a_missing_memo_ends_the_replay_but_not_what_is_known() -> None:
    cursor = Cursor(resume=False)
    cursor.met()
    cursor.fresh()
    assert (cursor.run_known, cursor.replaying) == (True, False)


def test_a_timer_leaves_the_place_after_it_open_until_a_steps_memo_takes_it() -> None:
    cursor = Cursor(resume=True)
    cursor.advance()
    cursor.waited()  # a sleep after step 1: an abort meeting it writes at step 2
    cursor.advance()  # a step writing no memo (uuid4) takes the number, not the place
    cursor.waited()
    assert cursor.after_waits == [2, 3]
    cursor.advance()
    cursor.took()  # step 3's memo
    assert cursor.after_waits == [2]
    cursor.restart()  # replayed from the start: the timers are met again
    assert cursor.after_waits is None
