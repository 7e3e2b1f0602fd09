"""``admin.fork`` / ``afork`` and ``idemflow runs fork``: a new request keeping an old one's steps
before ``from_step``, the rest run anew, on every store and both APIs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import (
    Idem,
    InvalidInputError,
    StepRetry,
    Tx,
    VersionNotHeldError,
    atomic,
    checkpoint,
    effect,
    set_event,
    uuid4,
    workflow,
)
from idemflow.admin import afork, fork, relay, show
from idemflow.client import RunStatus, get_event, status, submit
from idemflow.core.policy import pause
from idemflow.core.requests import Sleep
from idemflow.engine.drive import store_answer
from idemflow.errors import ForkStepError, NonDeterminismError, RequestExistsError, RequestNotFoundError
from idemflow.operator.forking import fork_steps
from idemflow.records import RunRecord, run_ref
from idemflow.stores import SqliteStore, Store
from idemflow.stores.base import Committed
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from idemflow.worker import MemoryQueue, Worker, open_queue
from tests.cli.test_cli import idemflow
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import LOOP, async_twin
from tests.support.workflows import data_rows

CALLS: dict[str, list[str]] = {}
"""The idempotency keys the outside service was called with, by test space."""
BUGGY: set[str] = set()
"""Spaces whose ``ship`` step still has its bug."""


def charge(space: str) -> Any:
    def call(key: str) -> dict[str, str]:
        CALLS.setdefault(space, []).append(key)
        return {"charge": key[:8]}

    return call


def ship(space: str) -> Any:
    def body(tx: Tx) -> str:
        if space in BUGGY:
            raise RuntimeError("the ship step's bug")
        tx.increment("shipped")
        return "shipped"

    return body


@workflow("fork-order", retry=StepRetry(initial=1, maximum_attempts=1))
def order(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    space = req["space"]
    yield atomic("tablea", space + "stock", lambda tx: tx.increment("held"), name="reserve")
    yield atomic("tableb", space + "ledger", lambda tx: tx.increment("owed", 10), name="bill")
    yield checkpoint()
    paid = yield effect(charge(space), name="charge")
    shipped = yield atomic("tablea", space + "stock", ship(space), name="ship")
    return {"paid": paid, "shipped": shipped}


@workflow("fork-order", version=2)
def order_v2(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["space"] + "stock", lambda tx: tx.increment("held"), name="reserve")


FLOWS = [order]


def counts(store: Store, space: str) -> dict[str, Any]:
    a, b = data_rows(store, "tablea"), data_rows(store, "tableb")
    return {
        "held": a.get(("tablea", space + "stock", "held")),
        "shipped": a.get(("tablea", space + "stock", "shipped")),
        "owed": b.get(("tableb", space + "ledger", "owed")),
        "calls": len(CALLS.get(space, [])),
    }


def everything(store: Store) -> dict[Any, Any]:
    return {
        **data_rows(store, "tablea"),
        **data_rows(store, "tableb"),
        **{("runs", p, k): r.value for p, k, r in store.scan("idemflowruns")},
    }


@pytest.fixture(params=["blocking", "asyncio"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def forked(flavour: str, store: Store, *args: Any, **options: Any) -> str:
    """Fork on the API under test; the new request's id."""
    if flavour == "blocking":
        return fork(store, *args, **options).request_id
    return LOOP.run(afork(async_twin(store), *args, **options)).request_id


def failed_order(store: Store, space: str, clock: Clock, queue: MemoryQueue) -> str:
    """A request whose ``ship`` step failed (its bug), then fixed: the code is right now."""
    BUGGY.add(space)
    submit(order({"space": space}), request_id=space + "old", store=store, queue=queue, clock=clock)
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    record = status(store, "fork-order", space + "old")
    assert record.status is RunStatus.FAILED and record.failure is not None and record.failure.step == 4
    BUGGY.discard(space)  # the fix is deployed
    return space + "old"


def test_a_failed_request_forked_from_its_failing_step_completes_applying_nothing_twice(
    store: Store, flavour: str
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    assert counts(store, space) == {"held": 1, "shipped": None, "owed": 10, "calls": 1}
    new = forked(
        flavour, store, FLOWS, "fork-order", old, from_step=4, new_request_id=space + "new", queue=queue
    )
    assert new == space + "new"
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    done = status(store, "fork-order", new)
    assert done.status is RunStatus.COMPLETED, done
    first_key = CALLS[space][0]
    assert done.result == {"paid": {"charge": first_key[:8]}, "shipped": "shipped"}
    # steps 1-3 were not applied again, the outside call was not made again; step 4 ran once
    assert counts(store, space) == {"held": 1, "shipped": 1, "owed": 10, "calls": 1}
    assert status(store, "fork-order", old).status is RunStatus.FAILED  # the old one is left as it was
    # the new request's steps are listed without the code, at both tables
    listed = show(store, [], "fork-order", new)
    assert [(s.number, s.name, s.table) for s in listed.steps] == [
        (1, "reserve", "tablea"),
        (2, "bill", "tableb"),
        (3, "charge", "idemflowruns"),
        (4, "ship", "tablea"),
    ]
    assert listed.notes == ()
    new_record = RunRecord.from_json(store.read(run_ref("fork-order", new)).value)  # type: ignore[union-attr]
    old_record = RunRecord.from_json(store.read(run_ref("fork-order", old)).value)  # type: ignore[union-attr]
    assert new_record.incarnation not in (None, old_record.incarnation)


def test_a_fork_from_the_first_step_runs_every_step_anew_with_new_keys(store: Store, flavour: str) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    req = {"space": space}
    submit(order(req), request_id=space + "old", store=store, queue=queue, clock=clock)
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-order", space + "old").status is RunStatus.COMPLETED
    with pytest.raises(InvalidInputError, match="no longer stores its input"):  # a finished request's is gone
        forked(flavour, store, FLOWS, "fork-order", space + "old", from_step=1, queue=queue)
    new = forked(
        flavour, store, FLOWS, "fork-order", space + "old", from_step=1, queue=queue, input=([req], {})
    )
    assert new.startswith(space + "old-fork-")
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-order", new).status is RunStatus.COMPLETED
    assert counts(store, space) == {"held": 2, "shipped": 2, "owed": 20, "calls": 2}
    assert CALLS[space][0] != CALLS[space][1]  # the outside call's key derives from the new request id


def test_a_fork_after_the_atomic_steps_on_two_tables_keeps_both(store: Store, flavour: str) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    new = forked(
        flavour, store, FLOWS, "fork-order", old, from_step=3, new_request_id=space + "n", queue=queue
    )
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-order", new).status is RunStatus.COMPLETED
    assert counts(store, space) == {"held": 1, "shipped": 1, "owed": 10, "calls": 2}
    assert CALLS[space][0] != CALLS[space][1]


def _driver_answer(store: Store, request: object) -> Any:
    """What :func:`~idemflow.engine.drive.drive` gives back for ``request``: the store's answer, a
    retry's pause, or the store's error to throw in (so the fork's own retry meets it)."""
    if isinstance(request, Sleep):
        return pause(request)
    try:
        return store_answer(store, request)
    except Exception as exc:  # noqa: BLE001 - thrown into the computation, as the driver does
        return exc


def test_two_forks_to_one_new_id_make_one_request(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    args = (store, None, FLOWS, "fork-order", old, 4, space + "new", None, None, None, clock)
    first = fork_steps(*args)
    request = next(first)
    while True:  # up to the first one's claim, answered as the driver answers (a store's transient
        answer = _driver_answer(store, request)  # error thrown in, a retry's sleep slept)
        request = first.throw(answer) if isinstance(answer, BaseException) else first.send(answer)
        if isinstance(answer, Committed):  # claimed: it dies here, its memos uncopied
            break
    first.close()
    assert status(store, "fork-order", space + "new").waiting is not None  # forking: no worker runs it
    # another fork to the same id from another step is refused; the same fork finishes the first
    with pytest.raises(RequestExistsError):
        fork(store, FLOWS, "fork-order", old, from_step=3, new_request_id=space + "new", queue=queue)
    fork(store, FLOWS, "fork-order", old, from_step=4, new_request_id=space + "new", queue=queue)
    deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-order", space + "new").status is RunStatus.COMPLETED
    assert counts(store, space) == {"held": 1, "shipped": 1, "owed": 10, "calls": 1}
    with pytest.raises(RequestExistsError):  # handed over, it is a request like any other
        fork(store, FLOWS, "fork-order", old, from_step=4, new_request_id=space + "new", queue=queue)


@workflow("fork-ids")
def with_ids(space: str) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", space + "a", lambda tx: tx.increment("n"), name="one")
    yield uuid4()
    yield checkpoint()
    yield atomic("tablea", space + "a", lambda tx: tx.increment("n"), name="three")


def test_every_refusal_comes_before_anything_is_written(store: Store, flavour: str) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    submit(with_ids(space), request_id=space + "ids", store=store, queue=queue, clock=clock)
    deliver_all(Worker([with_ids], store=store, queue=queue, clock=clock), queue, clock)
    old = failed_order(store, space, clock, queue)
    submit(order({"space": space + "o"}), request_id=space + "other", store=store, queue=queue, clock=clock)
    store.flush()  # the background cache writes (a places row resent after a conflict) land first
    before, queued = everything(store), queue.approximate_size()
    cases: list[tuple[type[Exception], dict[str, Any]]] = [
        (RequestNotFoundError, {"request_id": space + "none"}),
        (ForkStepError, {"from_step": 0}),
        (ForkStepError, {"from_step": 5}),  # it recorded 3 steps and failed at the 4th
        (ForkStepError, {"from_step": True}),
        (RequestExistsError, {"new_request_id": old}),
        (RequestExistsError, {"new_request_id": space + "other"}),
        (VersionNotHeldError, {"workflows": [order_v2]}),
        (InvalidInputError, {"input": ([{"space": "other"}], {})}),
    ]
    for error, changed in cases:
        options: dict[str, Any] = {
            "workflows": FLOWS,
            "request_id": old,
            "from_step": 4,
            "new_request_id": space + "new",
            **changed,
        }
        flows, request_id = options.pop("workflows"), options.pop("request_id")
        with pytest.raises(error):
            forked(flavour, store, flows, "fork-order", request_id, queue=queue, **options)
    with pytest.raises(ForkStepError, match="no step is recorded at 2"):  # the uuid4()'s number
        forked(
            flavour,
            store,
            [with_ids],
            "fork-ids",
            space + "ids",
            from_step=2,
            queue=queue,
            input=([space], {}),
        )
    store.flush()  # and any a refusal queued would be seen
    assert everything(store) == before and queue.approximate_size() == queued


@workflow("fork-order")
def renamed(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["space"] + "stock", lambda tx: tx.increment("held"), name="reserve")
    yield atomic("tableb", req["space"] + "ledger", lambda tx: tx.increment("owed", 10), name="invoice")
    yield checkpoint()
    yield effect(charge(req["space"]), name="charge")


def test_code_that_no_longer_replays_the_steps_kept_is_refused_but_may_change_after_them(
    store: Store,
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    with pytest.raises(NonDeterminismError):
        fork(store, [renamed], "fork-order", old, from_step=3, new_request_id=space + "n", queue=queue)
    new = fork(store, [renamed], "fork-order", old, from_step=2, new_request_id=space + "n", queue=queue)
    deliver_all(Worker([renamed], store=store, queue=queue, clock=clock), queue, clock)
    assert new.status() is RunStatus.COMPLETED
    assert counts(store, space) == {"held": 1, "shipped": None, "owed": 20, "calls": 2}


def test_the_cli_forks_a_request(tmp_path: Path) -> None:
    module = tmp_path / "fork_flows.py"
    root = str(Path(__file__).resolve().parents[2])
    module.write_text(
        f"import sys\nsys.path.insert(0, {root!r})\nfrom tests.operator.test_fork import FLOWS\n"
    )
    path, queue_path = tmp_path / "fork.sqlite3", tmp_path / "queue.sqlite3"
    store = SqliteStore(path)
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    store.close()
    open_queue(f"sqlite:{queue_path}").close()
    common = [
        "--store",
        f"sqlite:{path}",
        "--queue",
        f"sqlite:{queue_path}",
        "--workflows",
        "fork_flows:FLOWS",
    ]
    done = idemflow(
        "runs", "fork", *common, "fork-order", old, "--from-step", "4", "--new-id", "n-1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"request_id": "n-1", "forked_from": old, "from_step": 4}
    other_input = ["--from-step", "1", "--input", '[{"space": "elsewhere"}]']
    mismatch = idemflow("runs", "fork", *common, "fork-order", old, *other_input, cwd=tmp_path)
    assert mismatch.returncode == 2 and "fingerprint differs" in mismatch.stderr  # refused: exit 2
    workers = open_queue(f"sqlite:{queue_path}")
    assert workers.approximate_size() == 1  # the new request's pointer, for the workers
    workers.close()


ABORTING: set[str] = set()
"""Spaces whose ``decide`` step still aborts."""


def undo_hold(tx: Tx, _: Any) -> None:
    tx.increment("held", -1)


@workflow("fork-abort")
def undone(space: str) -> Generator[Idem[Any], Any, Any]:
    yield atomic(
        "tablea", space + "stock", lambda tx: tx.increment("held"), name="hold", compensate=undo_hold
    )
    yield checkpoint()
    yield atomic(
        "tablea", space + "stock", lambda tx: tx.abort("no") if space in ABORTING else "ok", name="decide"
    )
    return "kept"


def test_an_aborted_request_is_forked_from_before_its_undone_steps_only(store: Store, flavour: str) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    ABORTING.add(space)
    submit(undone(space), request_id=space + "old", store=store, queue=queue, clock=clock)
    deliver_all(Worker([undone], store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-abort", space + "old").status is RunStatus.ABORTED
    ABORTING.discard(space)
    with pytest.raises(ForkStepError, match="step 1 was undone"):  # the data no longer holds it
        forked(
            flavour,
            store,
            [undone],
            "fork-abort",
            space + "old",
            from_step=2,
            queue=queue,
            input=([space], {}),
        )
    new = forked(
        flavour, store, [undone], "fork-abort", space + "old", from_step=1, queue=queue, input=([space], {})
    )
    deliver_all(Worker([undone], store=store, queue=queue, clock=clock), queue, clock)
    assert status(store, "fork-abort", new).result == "kept"
    assert data_rows(store, "tablea")[("tablea", space + "stock", "held")] == 1


@workflow("fork-events")
def publishing(space: str) -> Generator[Idem[Any], Any, Any]:
    yield set_event("stage", "paid")
    yield atomic("tablea", space + "e", lambda tx: tx.increment("n"), name="count")
    yield checkpoint()
    yield set_event("stage", "shipped")


def test_a_running_request_is_forked_from_the_steps_it_committed_and_goes_on(
    store: Store, flavour: str
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    submit(
        publishing(space), request_id=space + "old", store=store, queue=queue, clock=clock
    )  # at its checkpoint
    new = forked(flavour, store, [publishing], "fork-events", space + "old", from_step=3, queue=queue)
    assert get_event(store, "fork-events", new, "stage", timeout=0) == "paid"  # copied with its step
    deliver_all(Worker([publishing], store=store, queue=queue, clock=clock), queue, clock)
    for request_id in (space + "old", new):
        assert status(store, "fork-events", request_id).status is RunStatus.COMPLETED
        assert get_event(store, "fork-events", request_id, "stage", timeout=0) == "shipped"
    assert data_rows(store, "tablea")[("tablea", space + "e", "n")] == 1  # the fork counted nothing again


class NthCommit:
    """A fault plan that strikes the ``n``-th distinct commit once (None: counts them only). A
    commit the store refused transiently (a DynamoDB transaction conflict under load) and the fork
    sent again is the same commit, not the next, so the sweep's points do not shift with load."""

    def __init__(self, n: int | None, fault: Fault | None) -> None:
        self.n, self.fault, self.seen, self.struck = n, fault, 0, False
        self._last: tuple[object, ...] | None = None

    def __call__(self, point: FaultPoint) -> Fault | None:
        if point.ops != self._last:
            self.seen, self._last = self.seen + 1, point.ops
        if self.seen - 1 != self.n or self.struck:
            return None
        self.struck = True
        return self.fault


@pytest.mark.slow  # a fork per commit and fault, each run to its end by a worker
def test_a_fork_that_dies_at_any_write_is_finished_by_the_same_fork(store: Store) -> None:
    """At each of the fork's commits in turn (the claim, a partition's copies, the hand-over) the
    process dies before or after the store applied it, or the answer is lost: calling the same
    fork again (and the outbox's relay) finishes it, and nothing is applied or called twice.

    Every fork is of one failed request, each to a new id of its own: each runs the step forked
    from (``ship``) once and nothing else, so the counts grow by one shipment per fork."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    old = failed_order(store, space, clock, queue)
    forks = 0

    def finished(new_request_id: str, why: object) -> None:
        nonlocal forks
        forks += 1
        clock.now += 3600
        relay(store, queue, clock=clock)  # an outbox entry whose pointer was never sent
        deliver_all(Worker(FLOWS, store=store, queue=queue, clock=clock), queue, clock)
        assert status(store, "fork-order", new_request_id).status is RunStatus.COMPLETED, why
        assert counts(store, space) == {"held": 1, "shipped": forks, "owed": 10, "calls": 1}, why

    watched = FaultyStore(store, (counted := NthCommit(None, None)))
    clean: dict[str, Any] = {"from_step": 4, "new_request_id": space + "n", "queue": queue}
    fork(watched, FLOWS, "fork-order", old, clock=clock, **clean)  # type: ignore[arg-type]
    finished(space + "n", "no fault")
    assert counted.seen >= 5, counted.seen  # the claim, three steps' copies, the hand-over
    for fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER):
        for n in range(counted.seen):
            new_id = f"{space}n{fault.name}{n}"
            dying = FaultyStore(store, NthCommit(n, fault))
            options: dict[str, Any] = {"from_step": 4, "new_request_id": new_id, "queue": queue}
            try:
                fork(dying, FLOWS, "fork-order", old, clock=clock, **options)  # type: ignore[arg-type]
            except SimulatedCrash:
                with contextlib.suppress(RequestExistsError):  # it died once the request was handed over
                    fork(store, FLOWS, "fork-order", old, clock=clock, **options)
            assert dying.injected, (fault, n)
            finished(new_id, (fault, n))
