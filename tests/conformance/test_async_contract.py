"""The asynchronous variant (checkpoints, queues, workers) on every store."""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from typing import Any

import pytest
from tenacity import Retrying, stop_after_attempt

from idemflow import Idem, WorkflowAborted, atomic, checkpoint, now, sleep, workflow
from idemflow.async_worklist.messages import Pointer, encode_pointer
from idemflow.client import RequestStatus, RunStatus
from idemflow.core.policy import DEFAULT_POLICY, resend
from idemflow.keys import MAX_ID_CHARS
from idemflow.records import run_ref
from idemflow.running.runner import run_status
from idemflow.stores import Store
from idemflow.stores.base import Committed, Delete
from idemflow.worker import MemoryQueue
from idemflow.worker import QueueMessage as Message
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.async_workflows import survey
from tests.support.expiries import expiries
from tests.support.workflows import rows_of

KEY = b"test-signing-key"


def drain(api: Api, store: Store, queue: MemoryQueue, **options: Any) -> Any:
    """Work the queue until it holds nothing (a short idle timeout can end a run early on a loaded
    machine: the same worker runs again for what is left; its counts add up across runs)."""
    worker = api.worker([survey], store=store, queue=queue, signing_key=KEY, wait=0.01, **options)
    stats = worker.run(idle_timeout=0.05)
    for _ in range(200):
        if queue.approximate_size() == 0:
            break
        stats = worker.run(idle_timeout=0.05)
    return stats


@pytest.mark.parametrize("at", [(), (0,), (1,), (2,), (0, 1, 2)])
def test_sync_and_async_leave_identical_tables(store: Store, at: tuple[int, ...], api: Api) -> None:
    sync_space, async_space = new_space(), new_space()
    for n in range(3):
        response = {"user": f"u{n}", "answer": "yes" if n % 2 else "no", "at": list(at)}
        assert api.run(
            survey({**response, "space": sync_space}), request_id=sync_space + str(n), store=store
        ) == {"counted": response["answer"]}
        queue = MemoryQueue()
        pending = api.submit(
            survey({**response, "space": async_space}),
            request_id=async_space + str(n),
            store=store,
            queue=queue,
            signing_key=KEY,
        )
        drain(api, store, queue)
        assert pending.result(timeout=10) == {"counted": response["answer"]}
    assert rows_of(store, async_space) == rows_of(store, sync_space)


def test_checkpoint_answers_before_the_rest_runs(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    pending = api.submit(
        survey({"space": space, "user": "u", "answer": "yes", "at": [1]}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    assert pending.status() is RunStatus.RUNNING
    assert rows_of(store, space) == {("tablea", "responses", "u"): "yes"}
    assert queue.approximate_size() == 1
    drain(api, store, queue)
    assert pending.status() is RunStatus.COMPLETED
    assert api.status(store, "survey", space).result == {"counted": "yes"}


def test_duplicate_and_reordered_messages_are_harmless(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    for n in (2, 1, 0, 1, 2, 0):  # each request submitted twice, in mixed order
        api.submit(
            survey({"space": space, "user": f"u{n}", "answer": "yes", "at": [1]}),
            request_id=f"{space}{n}",
            store=store,
            queue=queue,
            signing_key=KEY,
        )
    assert queue.approximate_size() == 3  # a duplicate submit enqueues nothing
    stats = drain(api, store, queue)
    assert stats.completed == 3 and stats.duplicates == 0 and stats.dead_lettered == 0
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 3


def test_abort_after_checkpoint_compensates_and_reports(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    pending = api.submit(
        survey({"space": space, "user": "u", "answer": "no", "at": [1], "abort": True}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    drain(api, store, queue)
    with pytest.raises(WorkflowAborted):
        pending.result(timeout=10)
    assert api.status(store, "survey", space).status is RunStatus.ABORTED


def test_worker_crash_loses_nothing(store: Store, api: Api) -> None:
    """A worker dying mid-workflow: the message comes back and the memos make the rerun exact."""
    from idemflow.testing import Fault, FaultyStore

    space = new_space()
    clock = [0.0]
    queue = MemoryQueue(visibility_timeout=30, clock=lambda: clock[0])
    api.submit(
        survey({"space": space, "user": "u", "answer": "yes", "at": [1]}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    crashing = FaultyStore(store, lambda p: Fault.LOST_ANSWER if p.index == 0 else None)
    [message] = queue.receive()
    worker = api.worker([survey], store=crashing, queue=queue, signing_key=KEY, max_deliveries=5)
    worker.handle(message)  # the lost answer is retried inside the engine: completes
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1
    # The same message delivered again (a duplicate) changes nothing.
    queue.send(message.body)
    drain(api, store, queue)
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1


def forged_bodies(space: str) -> dict[str, str]:
    good = Pointer("survey", 1, space + "x")
    signed = json.loads(encode_pointer(good, KEY))
    legacy = {"v": 1, "workflow": "survey", "request_id": space + "y", "input": {"args": [], "kwargs": {}}}
    return {
        "not json": "{nope",
        "not an object": "[1, 2]",
        "wrong version": json.dumps({**signed, "v": 99}),
        "unknown field": json.dumps({**signed, "pickle": "gASV"}),
        "unknown workflow": encode_pointer(Pointer("nosuch", 1, "r"), KEY),
        "unsigned": encode_pointer(good, None),
        "tampered": json.dumps({**signed, "request_id": space + "z"}),
        "other key": encode_pointer(good, b"another key"),
        "never submitted": encode_pointer(good, KEY),
        "bad version": json.dumps({**signed, "version": 0}),
        "bad recorded (format 1)": json.dumps({**legacy, "recorded": [["x1", 3]]}),
        "deep": "[" * 100_000 + "]" * 100_000,
    }


def test_forged_corrupt_and_unknown_messages_are_refused(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    bodies = forged_bodies(space)
    for body in bodies.values():
        queue.send(body)
    stats = drain(api, store, queue)
    assert stats.dead_lettered == len(bodies) and stats.finished == 0
    assert rows_of(store, space) == {}
    reasons = [reason for _, reason in queue.dead_letters()]
    assert all(reason.startswith("rejected") for reason in reasons), reasons


@workflow("survey")
def renamed_survey(response: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """The survey with its first step renamed but its version not raised: a deploy mistake."""
    yield atomic("tablea", response["space"] + "responses", lambda tx: tx.put("x", 1), name="renamed")
    yield checkpoint()
    count = yield atomic(
        "tableb", response["space"] + "summary", lambda tx: tx.increment("yes"), name="count"
    )
    return {"counted": count}


def test_changed_code_under_a_continuation_waits_and_never_runs(store: Store, api: Api) -> None:
    space = new_space()
    clock = [0.0]
    queue = MemoryQueue(clock=lambda: clock[0])
    request = {"space": space, "user": "u", "answer": "yes", "at": [1]}
    api.submit(survey(request), request_id=space, store=store, queue=queue, signing_key=KEY)
    [message] = queue.receive()
    changed = api.worker([renamed_survey], store=store, queue=queue, signing_key=KEY, max_deliveries=1)
    changed.handle(message)
    assert (changed.stats.waiting, changed.stats.dead_lettered, changed.stats.failed) == (1, 0, 0)
    assert ("tableb", "summary", "yes") not in rows_of(store, space)
    waiting = api.status(store, "survey", space)
    assert (
        waiting.status is RunStatus.RUNNING and waiting.waiting is not None and "renamed" in waiting.waiting
    )
    # Still queued, never dead-lettered: the right code finishes it when it comes back.
    clock[0] += 60
    [again] = queue.receive()
    assert again.deliveries == 1  # offered again as a fresh message: waiting is not an attempt
    api.worker([survey], store=store, queue=queue, signing_key=KEY).handle(again)
    assert api.status(store, "survey", space).result == {"counted": "yes"}
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1 and queue.dead_letters() == []


FINAL = (RunStatus.COMPLETED, RunStatus.ABORTED)


class AckWitness(MemoryQueue):
    """A memory queue that reads the request's status at each ack, as a client polling would."""

    def __init__(self, api: Api, store: Store) -> None:
        super().__init__()
        self.api = api
        self.store = store
        self.at_ack: list[RunStatus] = []

    def ack(self, message: Message) -> None:
        super().ack(message)
        self.at_ack.append(
            self.api.status(self.store, "survey", json.loads(message.body)["request_id"]).status
        )


def test_status_is_final_once_a_worker_acked_the_message(store: Store, api: Api) -> None:
    """The completion record is written before the ack: no flush, no close(), and a worker
    that died right after its ack would have lost nothing."""
    space = new_space()
    queue = AckWitness(api, store)
    requests = [f"{space}{n}" for n in range(6)]
    for n, request_id in enumerate(requests):
        response = {"space": space, "user": f"u{n}", "answer": "yes", "at": [1], "abort": n % 3 == 0}
        api.submit(survey(response), request_id=request_id, store=store, queue=queue, signing_key=KEY)
    worker = api.worker([survey], store=store, queue=queue, signing_key=KEY, wait=0.01, concurrency=2)
    stats = worker.run(idle_timeout=0.05)
    del worker  # abandoned: a Worker has nothing to close, and the store is neither flushed nor closed
    assert (stats.completed, stats.aborted, queue.approximate_size()) == (4, 2, 0)
    assert sorted(queue.at_ack, key=str) == [RunStatus.ABORTED] * 2 + [RunStatus.COMPLETED] * 4
    assert [api.status(store, "survey", request_id).status in FINAL for request_id in requests] == [True] * 6


@pytest.mark.parametrize("abort", [False, True], ids=["completed", "aborted"])
def test_a_request_that_finished_in_submit_is_final_when_submit_returns(
    store: Store, abort: bool, api: Api
) -> None:
    space = new_space()
    queue = MemoryQueue()
    response = {"space": space, "user": "u", "answer": "yes", "at": [], "abort": abort}
    pending = api.submit(survey(response), request_id=space, store=store, queue=queue, signing_key=KEY)
    stored = api.status(store, "survey", space)  # what anyone else sees at once, without a flush
    expected = RunStatus.ABORTED if abort else RunStatus.COMPLETED
    assert stored.status is expected and pending.outcome == stored and queue.approximate_size() == 0
    assert pending.status() is expected
    if abort:
        assert stored.reason == "closed"
        with pytest.raises(WorkflowAborted):
            pending.result(timeout=0)
    else:
        assert pending.result(timeout=0) == stored.result == {"counted": "yes"}
    # Submitted again: a duplicate of a finished request is final at once too, and runs nothing.
    again = api.submit(survey(response), request_id=space, store=store, queue=queue, signing_key=KEY)
    assert again.outcome == stored and queue.approximate_size() == 0
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1


def test_a_checkpointed_request_is_not_final_until_a_worker_finished_it(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    response = {"space": space, "user": "u", "answer": "yes", "at": [1]}
    pending = api.submit(survey(response), request_id=space, store=store, queue=queue, signing_key=KEY)
    assert pending.outcome is None and pending.status() is RunStatus.RUNNING
    drain(api, store, queue)
    assert pending.status() is RunStatus.COMPLETED
    assert pending.outcome == RequestStatus(RunStatus.COMPLETED, {"counted": "yes"})  # kept: final


@pytest.mark.exact_calls  # its policy resends nothing: only the injected fault may fail a call
def test_transient_failures_are_retried_and_invalid_input_is_rejected_at_once(store: Store, api: Api) -> None:

    from idemflow import RetryPolicy
    from idemflow.testing import Fault, FaultyStore

    space = new_space()
    clock = [0.0]
    queue = MemoryQueue(clock=lambda: clock[0])
    response = {"space": space, "user": "u", "answer": "yes", "at": [1]}
    api.submit(survey(response), request_id=space, store=store, queue=queue, signing_key=KEY)
    [message] = queue.receive()
    # The worker's first store read fails transiently and its policy resends nothing: the
    # message is retried, not dead-lettered. (The default policy resends it in place.)
    flaky = FaultyStore(store, lambda p: Fault.TRANSIENT if p.index == 0 else None, reads=True)
    once = RetryPolicy(transient=Retrying(stop=stop_after_attempt(1), reraise=True))
    worker = api.worker([survey], store=flaky, queue=queue, signing_key=KEY, max_deliveries=5, policy=once)
    worker.handle(message)
    assert (worker.stats.retried, worker.stats.dead_lettered, queue.dead_letters()) == (1, 0, [])
    clock[0] += 60
    [again] = queue.receive()
    worker.handle(again)
    assert again.deliveries == 2 and worker.stats.completed == 1
    # Input the library refuses (a request id too long) cannot succeed later: rejected at delivery 1.
    invalid = json.loads(message.body)
    invalid["request_id"] = "x" * (MAX_ID_CHARS + 1)
    invalid.pop("sig")
    queue.send(json.dumps(invalid))
    unsigned = api.worker([survey], store=store, queue=queue, max_deliveries=5)
    [first] = queue.receive()
    unsigned.handle(first)
    assert (first.deliveries, unsigned.stats.dead_lettered, unsigned.stats.retried) == (1, 1, 0)
    [(_, reason)] = queue.dead_letters()
    assert reason.startswith("rejected: invalid request id") and queue.approximate_size() == 0


@workflow("stamped")
def stamped(label: str) -> Generator[Idem[Any], Any, Any]:
    before = yield now()
    yield checkpoint()
    after = yield now()
    return {"label": label, "before": before, "after": after}


def test_submit_and_worker_take_the_clock_of_their_runs(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    submitted_at, finished_at = 1_900_000_000.0, 1_900_000_100.0
    pending = api.submit(
        stamped(space), request_id=space, store=store, queue=queue, clock=lambda: submitted_at
    )
    worker = api.worker([stamped], store=store, queue=queue, wait=0.01, clock=lambda: finished_at)
    assert worker.run(idle_timeout=0.05).completed == 1
    assert pending.result(timeout=0) == {"label": space, "before": submitted_at, "after": finished_at}
    record = run_status(store, "stamped", space)
    assert record is not None and record.finished_at == finished_at


def test_a_submission_reusing_an_id_whose_record_went_first_runs_every_step_again(
    store: Store, api: Api
) -> None:
    """TTL may delete a finished run record before its memos: a later submission with that id is
    a new request, and the worker that resumes it after the checkpoint runs the steps there again
    rather than replaying the old run's memos."""
    space = new_space()
    response = {"space": space, "user": "u", "answer": "yes", "at": [1]}
    for expected in (1, 2):
        queue = MemoryQueue()
        pending = api.submit(survey(response), request_id=space, store=store, queue=queue, signing_key=KEY)
        drain(api, store, queue)
        assert pending.result(timeout=10) == {"counted": "yes"}
        store.flush()
        assert rows_of(store, space)[("tableb", "summary", "yes")] == expected
        assert isinstance(resend(store.commit, [Delete(run_ref("survey", space))]), Committed)


@workflow("napping")
def napping(label: str) -> Generator[Idem[Any], Any, Any]:
    yield checkpoint()
    yield sleep(600)
    return label


def test_one_worker_run_again_after_the_clock_moves_renews_what_waited(store: Store, api: Api) -> None:
    """The test-clock pattern (advance, run, repeat): each ``run`` of the same worker takes
    messages again; the end of an earlier run (a stop() during it, its idle timeout) does not
    end the next one."""
    space, clock = new_space(), [1_900_000_000.0]
    queue = MemoryQueue(clock=lambda: clock[0])
    pending = api.submit(napping(space), request_id=space, store=store, queue=queue, clock=lambda: clock[0])
    worker = api.worker(
        [napping], store=store, queue=queue, wait=0.01, relay_every=None, clock=lambda: clock[0]
    )
    stopper = getattr(worker, "inner", worker)
    worker.run(on_progress=lambda _: stopper.stop(), progress_every=0.0)  # stopped during its run
    assert worker.run(idle_timeout=0.05).completed == 0
    waiting = run_status(store, "napping", space)
    assert waiting is not None and waiting.status is RunStatus.RUNNING and waiting.waiting
    clock[0] += 600
    assert worker.run(idle_timeout=0.05).completed == 1
    assert pending.result(timeout=0) == space


def test_rows_expire_a_retention_after_the_later_of_wall_time_and_the_clock(store: Store, api: Api) -> None:
    """``submit(clock=)`` and ``Worker(clock=)`` give ``now()``, ``finished_at`` and due times;
    rows expire a retention after the later of the machine's wall clock and that clock, so a run
    on a test's clock from 1970 writes no row that is already expired, and one on a clock moved
    far ahead (a test simulating weeks of waiting) writes rows that live a retention from then."""
    space, queue = new_space(), MemoryQueue()
    retention = DEFAULT_POLICY.retention
    for n, at in enumerate((100.0, 4_000_000_000.0)):
        rid = f"{space}{n}"
        api.submit(stamped(rid), request_id=rid, store=store, queue=queue, clock=lambda at=at: at)
        api.worker([stamped], store=store, queue=queue, wait=0.01, clock=lambda at=at: at).run(
            idle_timeout=0.05
        )
        assert run_status(store, "stamped", rid).finished_at == at  # type: ignore[union-attr]
        store.flush()
        written = [
            expires_at
            for (_, partition, key), expires_at in expiries(store).items()
            if expires_at is not None and rid in partition + key
        ]
        assert len(written) >= 2
        since = max(at, time.time())
        assert all(since - 60 < expires_at - retention <= max(at, time.time()) + 60 for expires_at in written)
