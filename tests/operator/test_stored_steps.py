"""Every committed step of a request listed without the workflow's code, on every store and both
APIs: ``admin.show(store, [], ...)`` / ``ashow`` read the memos beside the run record and the
atomic steps' memos at the places the record (or a checkpoint's places row) names, for a finished
request, one stopped at a checkpoint, one waiting on a timer, one a worker left between two record
writes, and an aborted one with its compensations; reading never writes."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    Idem,
    InvalidNameError,
    Tx,
    atomic,
    checkpoint,
    effect,
    now,
    receive,
    sleep,
    workflow,
)
from idemflow.admin import RequestView, ashow, show
from idemflow.client import RunStatus, send_message
from idemflow.core.policy import resend
from idemflow.records import RunRecord, run_ref
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Committed, Put
from idemflow.worker import MemoryQueue
from tests.conformance import conftest as api_dimension
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import LOOP, Api, async_twin

api = api_dimension.api  # both APIs, as in the conformance suite
pytest_generate_tests = api_dimension.pytest_generate_tests

RUNS = "idemflowruns"


def shown(api: Api, store: Store, workflow: str, request_id: str) -> RequestView:
    """The request as ``show`` (blocking) or ``ashow`` (asyncio) lists it without its code."""
    api.calls.note()  # a call of that API
    if api.name == "blocking":
        return show(store, [], workflow, request_id)
    return LOOP.run(ashow(async_twin(store), None, workflow, request_id))


def listing(view: RequestView) -> list[tuple[int, str, str, str, str, str]]:
    return [(s.number, s.kind, s.name, s.table, s.partition, s.outcome) for s in view.steps]


def everything(store: Store) -> dict[Any, Any]:
    tables = [RUNS, "tablea", "tableb"]
    return {(t, p, k): (r.value, r.version) for t in tables for p, k, r in store.scan(t)}


def _reserve(tx: Tx) -> int:
    left = int(tx.get("left", 10)) - 1
    tx.put("left", left)
    return left


@workflow("listed-order")
def ordered(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Five steps of five kinds, atomic ones on two tables."""
    space = req["space"]
    left = yield atomic("tablea", space + "stock", _reserve, name="reserve")
    at = yield now()
    paid = yield effect(lambda key: {"paid": key[:8]}, name="charge")
    note = yield receive("confirm")
    yield atomic("tableb", space + "ship", lambda tx: tx.put("to", note), name="ship")
    return {"left": left, "at": at, "paid": paid}


def test_a_finished_request_lists_every_step_without_its_code(store: Store, api: Api) -> None:
    space = new_space()
    send_message(store, ordered, space, "confirm", "door", key="k-1")  # taken by its receive
    result = api.run(ordered({"space": space}), request_id=space, store=store)
    before = everything(store)
    reads = store.round_trips
    view = shown(api, store, "listed-order", space)
    if api.name == "blocking":  # its partition, then its atomic steps' memos at once
        assert store.round_trips - reads <= 1 + 2  # Azure reads each place apart, the others in one call
    assert everything(store) == before  # listing never writes
    assert view.record.status is RunStatus.COMPLETED and view.record.result == result
    assert listing(view) == [
        (1, "atomic", "reserve", "tablea", space + "stock", "committed"),
        (2, "now", "", RUNS, space, "committed"),
        (3, "effect", "charge", RUNS, space, "committed"),
        (4, "receive", "confirm", RUNS, space, "committed"),
        (5, "atomic", "ship", "tableb", space + "ship", "committed"),
    ]
    assert [s.value for s in view.steps] == [9, result["at"], result["paid"], "door", None]
    assert all(s.at is not None for s in view.steps) and view.notes == ()
    assert view.to_json()["steps"][4]["table"] == "tableb"  # type: ignore[index]
    # with the code given, a finished request (its input gone) lists the same
    assert listing(show(store, [ordered], "listed-order", space)) == listing(view)


@workflow("listed-booking")
def booking(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Two atomic steps and a clock read before the checkpoint, then an effect, an atomic step on a
    new table and a timer under a worker, then one more step."""
    space = req["space"]
    yield atomic("tablea", space + "seats", lambda tx: tx.increment("held"), name="hold")
    yield atomic("tableb", space + "log", lambda tx: tx.put("held", True), name="log")
    yield now()
    yield checkpoint()
    yield effect(lambda key: key[:6], name="charge")
    yield atomic("tableb", space + "paid", lambda tx: tx.increment("paid"), name="paid")
    yield sleep(3600)
    return (yield atomic("tablea", space + "seats", lambda tx: tx.increment("done"), name="done"))


def test_a_running_request_lists_its_steps_at_a_checkpoint_and_on_a_timer(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(booking({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    store.flush()  # the places row is a cache write: off the caller's path on the cloud stores
    at_checkpoint = shown(api, store, "listed-booking", space)
    assert at_checkpoint.record.status is RunStatus.RUNNING
    assert listing(at_checkpoint) == [
        (1, "atomic", "hold", "tablea", space + "seats", "committed"),
        (2, "atomic", "log", "tableb", space + "log", "committed"),
        (3, "now", "", RUNS, space, "committed"),
    ]
    assert at_checkpoint.notes == ()
    worker = api.worker([booking], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # the charge, the payment, then the timer: handed over
    sleeping = shown(api, store, "listed-booking", space)
    assert sleeping.waits_for is not None and "sleeping until" in sleeping.waits_for
    assert [s.number for s in sleeping.steps] == [1, 2, 3, 4, 5, 6]
    assert listing(sleeping)[4] == (5, "atomic", "paid", "tableb", space + "paid", "committed")
    assert listing(sleeping)[5][:2] == (6, "sleep")
    assert sleeping.notes == ()
    deliver_all(worker, queue, clock, step=3600.0)
    finished = shown(api, store, "listed-booking", space)
    assert finished.record.status is RunStatus.COMPLETED
    assert listing(finished)[:6] == listing(sleeping)
    assert listing(finished)[6] == (7, "atomic", "done", "tablea", space + "seats", "committed")


class Crash(BaseException):
    """The process dies in the middle of a step (nothing catches it: not an error of the step)."""


CRASHING = [True]


def _crash(tx: Tx) -> None:
    if CRASHING[0]:
        raise Crash
    tx.increment("finally")


@workflow("listed-crash")
def crashing(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    space = req["space"]
    yield atomic("tablea", space + "p", lambda tx: tx.increment("first"), name="first")
    yield checkpoint()
    yield atomic("tablea", space + "p", lambda tx: tx.increment("second"), name="second")
    yield atomic("tablea", space + "p", lambda tx: tx.increment("third"), name="third")
    yield atomic("tablea", space + "p", _crash, name="fourth")


def test_steps_since_the_last_record_write_are_found_at_the_places_known(store: Store, api: Api) -> None:
    """A worker died after two steps of its own and before any write to the run record: those
    steps are read at the place the checkpoint named, by their numbers."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    api.submit(crashing({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    store.flush()
    worker = api.worker([crashing], store=store, queue=queue, clock=clock)
    CRASHING[0] = True
    try:
        with pytest.raises(Crash):
            worker.handle(queue.receive()[0])
    finally:
        CRASHING[0] = False
    row = store.read(run_ref("listed-crash", space))
    assert row is not None and RunRecord.from_json(row.value).places is None  # only the claim
    view = shown(api, store, "listed-crash", space)
    assert [(s.number, s.name, s.table) for s in view.steps] == [
        (1, "first", "tablea"),
        (2, "second", "tablea"),
        (3, "third", "tablea"),
    ]


def _refund(tx: Tx, _value: Any) -> None:
    tx.increment("left")


def _refuse(tx: Tx) -> None:
    tx.abort("sold out")


@workflow("listed-aborted")
def aborting(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    space = req["space"]
    yield atomic("tablea", space + "stock", _reserve, name="reserve", compensate=_refund)
    yield effect(lambda key: "noted", name="note")
    yield atomic("tableb", space + "shelf", _refuse, name="refuse")


def test_an_aborted_request_lists_its_abort_and_compensations(store: Store, api: Api) -> None:
    space = new_space()
    assert api.run_result(aborting({"space": space}), request_id=space, store=store).failure()
    view = shown(api, store, "listed-aborted", space)
    assert view.record.status is RunStatus.ABORTED
    assert listing(view) == [
        (1, "atomic", "reserve", "tablea", space + "stock", "committed"),
        (2, "effect", "note", RUNS, space, "committed"),
        (3, "atomic", "refuse", "tableb", space + "shelf", "aborted"),
        (1, "compensate", "reserve", "tablea", space + "stock", "compensated"),
    ]
    assert view.steps[2].value == "sold out"


@workflow("listed-table-less")
def table_less(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield now()
    return (yield effect(lambda key: "done", name="only"))


def test_a_request_without_atomic_steps_writes_no_places(store: Store, api: Api) -> None:
    """Nothing to name: its completion record holds the bytes it held before places were kept."""
    space = new_space()
    api.run(table_less({"space": space}), request_id=space, store=store)
    row = store.read(run_ref("listed-table-less", space))
    assert row is not None and not {"pl", "sn", "plm"} & set(row.value)
    view = shown(api, store, "listed-table-less", space)
    assert listing(view) == [
        (1, "now", "", RUNS, space, "committed"),
        (2, "effect", "only", RUNS, space, "committed"),
    ]
    assert view.notes == ()


@workflow("listed-one")
def one_step(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("tablea", req["space"] + "one", lambda tx: tx.increment("n"), name="only")
    return "one"


def test_a_request_s_only_step_is_listed_from_its_completion_record(store: Store, api: Api) -> None:
    """A request's only step commits with its outcome, whose record takes the place of its memo:
    its number, kind, place and time are the record's, and a note says what is not kept."""
    space = new_space()
    api.run(one_step({"space": space}), request_id=space, store=store)
    view = shown(api, store, "listed-one", space)
    ((step,),) = [view.steps]
    assert (step.number, step.kind, step.table, step.partition, step.outcome) == (
        1,
        "atomic",
        "tablea",
        space + "one",
        "committed",
    )
    if store.capabilities.cross_partition_commit:  # folded: the outcome's record is all there is
        assert step.name == "" and step.at == view.record.finished_at
        assert len(view.notes) == 1 and "took the place of the step's memo" in view.notes[0]
    else:  # claimed apart, the step commits in its own partition with its memo
        assert step.name == "only" and view.notes == ()


def test_a_record_naming_no_place_says_which_steps_it_cannot_list(store: Store, api: Api) -> None:
    """A run record as an earlier release wrote it (no ``pl``): the memos beside it are listed,
    and a note says the atomic steps are not, naming the numbers it knows of."""
    space = new_space()
    assert api.run_result(aborting({"space": space}), request_id=space, store=store).failure()
    ref = run_ref("listed-aborted", space)
    row = store.read(ref)
    assert row is not None
    older = {key: value for key, value in row.value.items() if key not in ("pl", "sn")}
    # Resent: DynamoDB Local may still hold the run's transaction on the row.
    assert isinstance(resend(store.commit, [Put(ref, older, encode(older), expect=row.version)]), Committed)
    view = shown(api, store, "listed-aborted", space)
    assert [(s.number, s.kind) for s in view.steps] == [(2, "effect")]
    # step 3 is past the last memo beside the record: nothing says it exists
    assert view.notes == (
        "atomic steps are not listed (step 1 among them): the run record names no place of them "
        "(an earlier release's record)",
    )
    assert any(line.startswith("  note: atomic steps are not listed") for line in view.lines())


def test_bad_names_are_refused_before_anything_is_read(store: Store, api: Api) -> None:
    reads = store.round_trips
    with pytest.raises(InvalidNameError):
        shown(api, store, "no spaces allowed", "r-1")
    with pytest.raises(InvalidNameError):
        shown(api, store, "listed-order", "")
    if api.name == "blocking":
        assert store.round_trips == reads
