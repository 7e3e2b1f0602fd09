"""Operating idemflow: list requests, retry a failed one after a fix, abort one; on every store."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from idemflow import InvalidInputError, StepRetry, run
from idemflow.admin import abort_request as abort
from idemflow.admin import retry, runs
from idemflow.client import RunStatus, status, submit
from idemflow.stores import Store
from idemflow.stores.base import PagedRuns, RunQuery
from idemflow.testing import Fault, FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue, Worker
from tests.cli.test_cli import idemflow
from tests.conformance.test_continuations import Clock, balance, deliver_all, order
from tests.conformance.test_workflow_contract import new_space
from tests.support.checkout_workflows import V1, checkout_v1
from tests.support.fixed_checkout import FIXED


def failed_request(store: Store, space: str, clock: Clock, queue: MemoryQueue) -> str:
    submit(checkout_v1(order(space, explode=True)), request_id=space + "bad", store=store, queue=queue)
    deliver_all(
        Worker(V1, store=store, queue=queue, step_retry=StepRetry(maximum_attempts=2), clock=clock),
        queue,
        clock,
    )
    assert status(store, "checkout", space + "bad").status is RunStatus.FAILED
    return space + "bad"


def test_runs_lists_requests_by_workflow_status_and_age(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    failed = failed_request(store, space, clock, queue)
    submit(checkout_v1(order(space, 1)), request_id=space + "queued", store=store, queue=queue, clock=clock)
    clock.now += 3600
    run(checkout_v1(order(space, 2)), request_id=space + "done", store=store, clock=clock)
    store.flush()
    listed = runs(store, workflow="checkout")
    mine = [found for found in listed.runs if found.request_id.startswith(space)]
    assert {found.request_id: found.status for found in mine} == {
        failed: RunStatus.FAILED,
        space + "queued": RunStatus.RUNNING,
        space + "done": RunStatus.COMPLETED,
    }
    if listed.order == "newest first":
        assert mine[0].request_id == space + "done"
    failing = runs(store, workflow="checkout", status=RunStatus.FAILED).runs
    assert failed in [found.request_id for found in failing]
    [shown] = [found.to_json() for found in failing if found.request_id == failed]
    assert shown["failure"] == {
        "reason": "KeyError: 'address'",
        "step": 2,
        "attempts": 2,
        "identity": "atomic ship",  # the failed step's kind and name, not just its number
    }
    old = [
        found.request_id
        for found in runs(store, older_than=1800, now=clock).runs
        if found.request_id[:1] == "s"
    ]
    assert space + "queued" in old and space + "done" not in old
    assert len(runs(store, limit=1).runs) == 1 and runs(store, workflow="nosuch").runs == ()


def test_finished_requests_keep_the_time_they_started(store: Store) -> None:
    """``idemflow runs list`` shows when a finished request started: its completion record keeps
    the claim's time, whoever finished it (``run``, a worker, an abort, a ``run`` resuming a crashed one)."""
    space, clock = new_space(), Clock()
    queue, other = MemoryQueue(clock=clock), MemoryQueue(clock=clock)
    began = clock.now
    run(checkout_v1(order(space, 1)), request_id=space + "ran", store=store, clock=clock)
    submit(checkout_v1(order(space, 2)), request_id=space + "worked", store=store, queue=queue, clock=clock)
    submit(checkout_v1(order(space, 3)), request_id=space + "aborted", store=store, queue=other, clock=clock)
    run(checkout_v1(order(space, 4)), request_id=space + "twice", store=store, clock=clock)
    dying = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):  # claimed with its first step, then the process died
        run(checkout_v1(order(space, 5)), request_id=space + "resumed", store=dying, clock=clock)
    store.flush()  # completion records some stores write in the background
    clock.now += 60
    run(checkout_v1(order(space, 5)), request_id=space + "resumed", store=store, clock=clock)
    deliver_all(Worker(V1, store=store, queue=queue, clock=clock), queue, clock)
    abort(store, V1, "checkout", space + "aborted", reason="stop", clock=clock)
    assert run(checkout_v1(order(space, 4)), request_id=space + "twice", store=store, clock=clock)
    store.flush()
    shown = [found.to_json() for found in runs(store, workflow="checkout").runs]
    times = {
        str(one["request_id"])[len(space) :]: (one["status"], one.get("started_at"), one.get("finished_at"))
        for one in shown
        if str(one["request_id"]).startswith(space)
    }
    assert times == {
        "ran": ("completed", began, began),
        "worked": ("completed", began, began + 60),
        "aborted": ("aborted", began, began + 60),
        "twice": ("completed", began, began),
        "resumed": ("completed", began, began + 60),
    }


def test_open_runs_are_found_without_reading_finished_ones(store: Store) -> None:
    """``runs list --status running|failed`` reads an index of open runs where the store keeps one
    (DynamoDB's sparse index; SQLite's and memory's query): finished requests are not in it, and
    a request leaves it when it finishes. Azure has no secondary index: it filters a paged query."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    failed = failed_request(store, space, clock, queue)
    submit(checkout_v1(order(space, 1)), request_id=space + "queued", store=store, queue=queue, clock=clock)
    run(checkout_v1(order(space, 2)), request_id=space + "done", store=store, clock=clock)
    store.flush()
    assert isinstance(store, PagedRuns)

    def open_ones(workflow: str | None = "checkout") -> set[str]:
        page = store.run_page(RunQuery(1000, workflow=workflow, open_only=True))
        return {item.partition for item in page if item.partition.startswith(space)}

    assert open_ones() == {failed, space + "queued"} == open_ones(None)
    assert store.run_page(RunQuery(10, workflow="nosuch", open_only=True)) == []
    running = [found.request_id for found in runs(store, workflow="checkout", status=RunStatus.RUNNING).runs]
    assert space + "queued" in running and space + "done" not in running and failed not in running
    deliver_all(Worker(V1, store=store, queue=queue), queue, clock)  # the queued one finishes
    store.flush()
    running = [found.request_id for found in runs(store, workflow="checkout", status=RunStatus.RUNNING).runs]
    assert space + "queued" not in running and space + "queued" not in open_ones()


def test_retry_resumes_a_failed_request_after_a_fix(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    failed = failed_request(store, space, clock, queue)
    assert retry(store, queue, "checkout", failed) is RunStatus.FAILED
    assert retry(store, queue, "checkout", failed) is RunStatus.RUNNING  # twice: a harmless duplicate
    assert status(store, "checkout", failed).status is RunStatus.RUNNING
    deliver_all(Worker(FIXED, store=store, queue=queue), queue, clock)
    done = status(store, "checkout", failed)
    assert done.result == {"version": 1, "shipped": "shipped"} and balance(store, space) == -10
    assert retry(store, queue, "checkout", failed) is RunStatus.COMPLETED and queue.approximate_size() == 0
    with pytest.raises(InvalidInputError, match="no request"):
        retry(store, queue, "checkout", space + "never")


def test_abort_compensates_once_and_ends_aborted(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    failed = failed_request(store, space, clock, queue)
    assert balance(store, space) == -10
    ended = abort(store, V1, "checkout", failed, reason="customer asked")
    assert (ended.status, ended.reason) == (RunStatus.ABORTED, "customer asked")
    assert abort(store, V1, "checkout", failed, reason="again") == ended  # twice: the first outcome
    assert balance(store, space) == 0  # refunded once
    dying = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):  # a `run` that died after its debit
        run(checkout_v1(order(space, 5)), request_id=space + "sync", store=dying)
    with pytest.raises(InvalidInputError, match="started by run"):
        abort(store, V1, "checkout", space + "sync", reason="x")


def test_abort_racing_a_worker_ends_one_way_exactly_once(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    requests = [f"{space}{n}" for n in range(6)]
    for n, request_id in enumerate(requests):
        submit(checkout_v1(order(space, n)), request_id=request_id, store=store, queue=queue)
    worker = Worker(V1, store=store, queue=queue, wait=0.01, relay_every=None)
    draining = threading.Thread(target=worker.run, kwargs={"idle_timeout": 0.3})
    draining.start()
    for request_id in requests:
        abort(store, V1, "checkout", request_id, reason="stop")
    draining.join()
    ends = [status(store, "checkout", request_id).status for request_id in requests]
    assert set(ends) <= {RunStatus.COMPLETED, RunStatus.ABORTED}
    assert balance(store, space) == -10 * ends.count(RunStatus.COMPLETED)  # aborted ones refunded once


def test_the_cli_lists_retries_and_aborts(tmp_path: Path) -> None:
    from idemflow.stores import SqliteStore
    from idemflow.worker import SqliteQueue

    store_url, queue_url = f"sqlite:{tmp_path / 'shop.db'}", f"sqlite:{tmp_path / 'queue.db'}"
    store, queue = SqliteStore(tmp_path / "shop.db"), SqliteQueue(tmp_path / "queue.db")
    clock = Clock()
    failed = failed_request(store, "s-", clock, MemoryQueue(clock=clock))
    submit(checkout_v1(order("s-", 1)), request_id="s-queued", store=store, queue=queue)
    listed = idemflow("runs", "list", "--store", store_url, "--status", "failed")
    assert listed.returncode == 0 and failed in listed.stdout and "KeyError" in listed.stdout
    assert "1 request(s)" in listed.stderr
    retried = idemflow("retry", "--store", store_url, "--queue", queue_url, "checkout", failed)
    assert retried.returncode == 0 and '"resubmitted": true' in retried.stdout
    aborted = idemflow(
        "abort", "--store", store_url, "--workflows", "tests.support.checkout_workflows:V1",
        "checkout", "s-queued", "--reason", "out of stock",
    )  # fmt: skip
    assert aborted.returncode == 0 and '"aborted"' in aborted.stdout
    assert status(store, "checkout", "s-queued").reason == "out of stock"
    assert (
        idemflow("status", "--store", store_url, "chekout", failed).stdout.strip() == '{"status": "unknown"}'
    )
    missing = idemflow("status", "--store", "sqlite://data/x.db", "checkout", failed)
    assert missing.returncode == 2 and "no database file" in missing.stderr and "sqlite://x" in missing.stderr
    assert not Path("/data/x.db").exists()


def test_worker_log_events_name_the_request(caplog: pytest.LogCaptureFixture) -> None:
    from idemflow.stores import MemoryStore

    store, clock = MemoryStore(), Clock()
    queue = MemoryQueue(clock=clock)
    with caplog.at_level("INFO", logger="idemflow"):
        failed_request(store, "s-", clock, queue)
    events = {
        json.loads(record.getMessage())["event"]: record
        for record in caplog.records
        if record.name == "idemflow.worker"
    }
    assert {"retry", "failed"} <= set(events)
    for event in ("retry", "failed"):
        fields = vars(events[event])
        assert (fields["workflow"], fields["request_id"], fields["version"], fields["step"]) == (
            "checkout", "s-bad", 1, 2
        )  # fmt: skip
        assert fields["attempt"] in (1, 2)


def test_the_cli_lists_and_redrives_dead_letters(tmp_path: Path) -> None:
    from idemflow.worker import SqliteQueue

    queue_url = f"sqlite:{tmp_path / 'queue.db'}"
    queue = SqliteQueue(tmp_path / "queue.db")
    for body in ("{nope", "[1]"):
        queue.send(body)
        [message] = queue.receive()
        queue.dead_letter(message, "rejected: not JSON")
    listed = idemflow("dead-letters", "list", "--queue", queue_url)
    assert listed.returncode == 0 and listed.stdout.count("rejected: not JSON") == 2
    first = json.loads(listed.stdout.splitlines()[0])["id"]
    one = idemflow("dead-letters", "redrive", "--queue", queue_url, "--id", first)
    assert one.stdout.strip() == "redrove 1 dead letter(s) onto the queue"
    assert idemflow("dead-letters", "redrive", "--queue", queue_url).stdout.startswith("redrove 1 ")
    assert idemflow("dead-letters", "redrive", "--queue", queue_url).stdout.startswith("redrove 0 ")
    assert queue.approximate_size() == 2 and queue.dead_letters() == []
