"""The asynchronous variant (DESIGN.md section 5) on every store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idemflow import Store, run
from idemflow.async_worklist import MemoryQueue, Worker, status, submit
from idemflow.async_worklist.messages import Continuation, RecordedStep, encode_continuation
from idemflow.compensation import WorkflowAborted
from idemflow.records import RunStatus
from idemflow.serialization import JSON
from tests.async_workflows import survey
from tests.conformance.test_workflow_contract import new_space
from tests.workflows import rows_of

KEY = b"test-signing-key"


def drain(store: Store, queue: MemoryQueue, **options: Any) -> Any:
    return Worker([survey], store=store, queue=queue, signing_key=KEY, wait=0.01, **options).run(
        idle_timeout=0.05
    )


@pytest.mark.parametrize("at", [(), (0,), (1,), (2,), (0, 1, 2)])
def test_sync_and_async_leave_identical_tables(store: Store, at: tuple[int, ...]) -> None:
    sync_space, async_space = new_space(), new_space()
    for n in range(3):
        response = {"user": f"u{n}", "answer": "yes" if n % 2 else "no", "at": list(at)}
        assert run(
            survey({**response, "space": sync_space}), request_id=sync_space + str(n), store=store
        ) == {"counted": response["answer"]}
        queue = MemoryQueue()
        pending = submit(
            survey({**response, "space": async_space}),
            request_id=async_space + str(n),
            store=store,
            queue=queue,
            signing_key=KEY,
        )
        drain(store, queue)
        assert pending.result(timeout=10) == {"counted": response["answer"]}
    assert rows_of(store, async_space) == rows_of(store, sync_space)


def test_checkpoint_answers_before_the_rest_runs(store: Store) -> None:
    space = new_space()
    queue = MemoryQueue()
    pending = submit(
        survey({"space": space, "user": "u", "answer": "yes", "at": [1]}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    assert pending.status() is RunStatus.RUNNING
    assert rows_of(store, space) == {("tablea", "responses", "u"): "yes"}
    assert queue.approximate_size() == 1
    drain(store, queue)
    assert pending.status() is RunStatus.COMPLETED
    assert status(store, "survey", space).result == {"counted": "yes"}


def test_duplicate_and_reordered_messages_are_harmless(store: Store) -> None:
    space = new_space()
    queue = MemoryQueue()
    for n in (2, 1, 0, 1, 2, 0):  # each request submitted twice, in mixed order
        submit(
            survey({"space": space, "user": f"u{n}", "answer": "yes", "at": [1]}),
            request_id=f"{space}{n}",
            store=store,
            queue=queue,
            signing_key=KEY,
        )
    stats = drain(store, queue)
    assert stats.completed + stats.duplicates == 6 and stats.dead_lettered == 0
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 3


def test_abort_after_checkpoint_compensates_and_reports(store: Store) -> None:
    space = new_space()
    queue = MemoryQueue()
    pending = submit(
        survey({"space": space, "user": "u", "answer": "no", "at": [1], "abort": True}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    drain(store, queue)
    with pytest.raises(WorkflowAborted):
        pending.result(timeout=10)
    assert status(store, "survey", space).status is RunStatus.ABORTED


def test_worker_crash_loses_nothing(store: Store) -> None:
    """A worker dying mid-workflow: the message comes back and the memos make the rerun exact."""
    from idemflow.testing import Fault, FaultyStore

    space = new_space()
    clock = [0.0]
    queue = MemoryQueue(visibility_timeout=30, clock=lambda: clock[0])
    submit(
        survey({"space": space, "user": "u", "answer": "yes", "at": [1]}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    crashing = FaultyStore(store, lambda p: Fault.LOST_ANSWER if p.index == 0 else None)
    [message] = queue.receive()
    worker = Worker([survey], store=crashing, queue=queue, signing_key=KEY, max_deliveries=5)
    worker.handle(message)  # the lost answer is retried inside the engine: completes
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1
    # The same message delivered again (a duplicate) changes nothing.
    queue.send(message.body)
    drain(store, queue)
    assert rows_of(store, space)[("tableb", "summary", "yes")] == 1


def forged_bodies(space: str) -> dict[str, str]:
    response: dict[str, JSON] = {"space": space, "user": "z", "answer": "yes", "at": [1]}
    good = Continuation("survey", space + "x", [response], {}, ())
    signed = json.loads(encode_continuation(good, KEY))
    tampered = {**signed, "input": {"args": [{**signed["input"]["args"][0], "answer": "no"}], "kwargs": {}}}
    return {
        "not json": "{nope",
        "not an object": "[1, 2]",
        "wrong version": json.dumps({**signed, "v": 99}),
        "unknown field": json.dumps({**signed, "pickle": "gASV"}),
        "unknown workflow": encode_continuation(Continuation("nosuch", "r", [], {}, ()), KEY),
        "unsigned": encode_continuation(good, None),
        "tampered": json.dumps(tampered),
        "other key": encode_continuation(good, b"another key"),
        "never submitted": encode_continuation(good, KEY),
        "bad recorded": json.dumps({**signed, "recorded": [["x1", 3]]}),
        "deep": "[" * 100_000 + "]" * 100_000,
    }


def test_forged_corrupt_and_unknown_messages_are_refused(store: Store) -> None:
    space = new_space()
    queue = MemoryQueue()
    bodies = forged_bodies(space)
    for body in bodies.values():
        queue.send(body)
    stats = drain(store, queue)
    assert stats.dead_lettered == len(bodies) and stats.finished == 0
    assert rows_of(store, space) == {}
    reasons = [reason for _, reason in queue.dead_letters()]
    assert all(reason.startswith("rejected") for reason in reasons), reasons


def test_changed_code_under_a_continuation_is_dead_lettered(store: Store) -> None:
    space = new_space()
    queue = MemoryQueue()
    submit(
        survey({"space": space, "user": "u", "answer": "yes", "at": [1]}),
        request_id=space,
        store=store,
        queue=queue,
        signing_key=KEY,
    )
    [message] = queue.receive()
    changed = json.loads(message.body)
    changed["recorded"][0][1] = "atomic renamed"
    changed.pop("sig")
    steps = tuple(RecordedStep(*step) for step in changed["recorded"])
    given = changed["input"]
    continuation = Continuation(
        changed["workflow"], changed["request_id"], given["args"], given["kwargs"], steps
    )
    queue.send(encode_continuation(continuation, KEY))
    queue.ack(message)
    stats = drain(store, queue)
    assert stats.dead_lettered == 1 and "non-deterministic" in queue.dead_letters()[0][1]
    assert ("tableb", "summary", "yes") not in rows_of(store, space)
