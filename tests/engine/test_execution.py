"""Execution: builds its parts, runs a request to its outcome, and leaves nothing behind."""

from __future__ import annotations

import gc
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from idemflow import Idem, Tx, atomic
from idemflow.admin import RunRecord
from idemflow.client import RunStatus
from idemflow.engine.execution import Execution
from idemflow.engine.monad import Call
from idemflow.records import run_ref
from tests.support.engine_rows import CROSS, Rows


def _add(tx: Tx) -> int:
    tx.increment("n")
    return 1


def _flow() -> Generator[Idem[Any], Any, int]:
    first: int = yield atomic("items", "p1", _add)
    second: int = yield atomic("items", "p2", _add)
    return first + second


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_request_runs_to_its_outcome_in_as_many_commits_as_steps() -> None:
    rows = Rows()
    record = rows.run(Execution(CROSS, "wf", "r1", "fp").run(Call("wf", _flow, (), {})))
    assert (record.status, record.result) == (RunStatus.COMPLETED, 2)
    assert len(rows.commits()) == 2  # the outcome rode in the last step's commit
    assert RunRecord.from_json(rows.rows[run_ref("wf", "r1")][0]).result == 2
    again = rows.run(Execution(CROSS, "wf", "r1", "fp").run(Call("wf", _flow, (), {})))
    assert again.result == 2 and len(rows.commits()) == 3  # a duplicate: one refused claim


def test_an_execution_is_freed_without_the_cycle_collector(no_collector: None) -> None:
    """Parts refer down, never back to the execution: a cycle would keep every finished
    execution alive until a collection, which a one-step request pays for."""
    rows = Rows()
    for number in range(20):
        rows.run(Execution(CROSS, "wf", f"r{number}", "fp").run(Call("wf", _flow, (), {})))
    assert gc.collect() == 0
