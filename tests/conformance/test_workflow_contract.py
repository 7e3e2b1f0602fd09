"""Workflow semantics on every store, unchanged."""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Callable, Generator
from typing import Any

import pytest

import idemflow
from idemflow import (
    ConflictError,
    Idem,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidNameError,
    InvalidValueError,
    LimitExceededError,
    NonDeterminismError,
    RetryPolicy,
    Tx,
    WorkflowAborted,
    atomic,
    effect,
    idempotent,
    now,
    pure,
    random,
    uuid4,
    workflow,
)
from idemflow.client import RunStatus
from idemflow.running.runner import run_status
from idemflow.stores import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from tests.support.apis import Api
from tests.support.workflows import rows_of, setup_accounts, transfer

_spaces = itertools.count()


def new_space() -> str:
    return f"s{uuid.uuid4().hex[:6]}{next(_spaces)}-"


def transfer_req(space: str, amount: int = 30, dst: str = "bob") -> dict[str, Any]:
    return {"space": space, "src": "alice", "dst": dst, "amount": amount}


def before_step(step: int, fault: Fault = Fault.CRASH_BEFORE) -> Callable[[FaultPoint], Fault | None]:
    """A plan injecting ``fault`` at the commit of forward step ``step`` (found by its memo,
    so it works whether or not the run record has a commit of its own)."""
    suffix = f"|s{step}"

    def plan(point: FaultPoint) -> Fault | None:
        hit = any(op.ref.key.startswith("m") and op.ref.key.endswith(suffix) for op in point.ops)
        return fault if point.kind == "commit" and hit else None

    return plan


def run_until_done(api: Api, m: Idem[Any], request_id: str, store: Store, limit: int = 50) -> Any:
    """Retry after every simulated crash, as a supervisor would."""
    for _ in range(limit):
        try:
            return api.run(m, request_id=request_id, store=store)
        except SimulatedCrash:
            continue
    raise AssertionError("did not finish")


def test_transfer_runs_and_duplicates_return_the_same(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    req = transfer_req(space)
    first = api.run(transfer(req), request_id="t1", store=store)
    assert first == {"left": 70, "dst": 30}
    after_first = rows_of(store, space)
    for _ in range(3):
        assert api.run(transfer(req), request_id="t1", store=store) == first
    store.flush()
    assert rows_of(store, space) == after_first
    assert after_first[("accounts", "alice", "balance")] == 70
    assert after_first[("accounts", "bob", "balance")] == 30
    assert after_first[("ledger", "log", "transfers")] == 1


def test_distinct_requests_each_apply(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    for n in range(3):
        api.run(transfer(transfer_req(space, 10)), request_id=f"t{n}", store=store)
    rows = rows_of(store, space)
    assert rows[("accounts", "alice", "balance")] == 70
    assert rows[("accounts", "alice", "history")] == [-10, -10, -10]
    assert rows[("ledger", "log", "transfers")] == 3


def test_reused_request_id_with_other_input_is_refused_before_writing(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    api.run(transfer(transfer_req(space, 10)), request_id="same", store=store)
    before = rows_of(store, space)
    with pytest.raises(IdempotencyKeyReuseError) as caught:
        api.run(transfer(transfer_req(space, 99)), request_id="same", store=store)
    assert caught.value.workflow == "transfer" and caught.value.request_id == "same"
    assert rows_of(store, space) == before


def test_reused_request_id_refused_even_while_first_is_unfinished(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    crash_second = FaultyStore(store, before_step(2))
    with pytest.raises(SimulatedCrash):
        api.run(transfer(transfer_req(space, 10)), request_id="half", store=crash_second)
    before = rows_of(store, space)
    with pytest.raises(IdempotencyKeyReuseError):
        api.run(transfer(transfer_req(space, 50)), request_id="half", store=store)
    assert rows_of(store, space) == before
    assert api.run(transfer(transfer_req(space, 10)), request_id="half", store=store)["left"] == 90


def clean_rows(api: Api, store: Store, amount: int = 30, dst: str = "bob") -> dict[Any, Any]:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    with contextlib.suppress(WorkflowAborted):
        api.run(transfer(transfer_req(space, amount, dst)), request_id="clean", store=store)
    return rows_of(store, space)


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER, Fault.TRANSIENT])
def test_fault_at_every_commit_then_retry_equals_one_clean_run(store: Store, fault: Fault, api: Api) -> None:
    reference = clean_rows(api, store)
    commits = 6  # run record (Azure), three steps, slack: points past the end are harmless
    for point in range(commits):
        space = new_space()
        setup_accounts(store, space, {"alice": 100, "bob": 0})

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.index == point else None

        faulty = FaultyStore(store, plan)
        result = run_until_done(api, transfer(transfer_req(space)), f"t{point}", faulty)
        assert result == {"left": 70, "dst": 30}
        assert rows_of(store, space) == reference, (fault, point)


@pytest.mark.parametrize("fault", [Fault.LOST_ANSWER, Fault.TRANSIENT])
def test_a_lost_or_failed_send_does_not_run_the_workflow_again_in_the_same_call(
    store: Store, fault: Fault, api: Api
) -> None:
    """A step's commit that waits for the workflow's next move and then fails to send, or whose
    answer is lost, is sent again (a lost one meets its own memo, and counts as committed):
    the workflow function is not started over, so one that changes its own input (here it takes
    an item off its order) still answers right, in one call, and every step applies once."""
    for point in range(4):
        space = new_space()
        order = {"space": space, "items": ["a", "b"]}

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.kind == "commit" and p.index == point else None

        faulty = FaultyStore(store, plan)
        assert api.run(takes_items(order), request_id=f"{space}t{point}", store=faulty) == ["b", "a"]
        rows = rows_of(store, space)
        assert (rows[("ledger", "log", "b")], rows[("ledger", "log", "a")]) == (1, 1), (fault, point)


def counted(item: str) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        tx.increment(item)
        return item

    return body


@workflow("takes_items")
def takes_items(order: dict[str, Any]) -> Generator[Idem[Any], Any, list[str]]:
    space, taken = order["space"], []
    while order["items"]:
        item = order["items"].pop()  # changes its own input, outside any step
        taken.append((yield atomic("ledger", space + "log", counted(item))))
    return taken


def test_racing_executions_all_return_one_result(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 100, "bob": 0})
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def contender() -> None:
        barrier.wait()
        try:
            results.append(api.run(transfer(transfer_req(space)), request_id="race", store=store))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=contender) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [{"left": 70, "dst": 30}] * 6
    rows = rows_of(store, space)
    assert rows[("accounts", "alice", "balance")] == 70
    assert rows[("accounts", "alice", "history")] == [-30]
    assert rows[("ledger", "log", "transfers")] == 1


def test_concurrent_distinct_requests_on_one_partition_all_apply(store: Store, api: Api) -> None:
    space = new_space()
    setup_accounts(store, space, {"alice": 1000, "bob": 0})
    errors: list[BaseException] = []

    def transfer_one(n: int) -> None:
        try:
            api.run(transfer(transfer_req(space, 1)), request_id=f"c{n}", store=store)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=transfer_one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = rows_of(store, space)
    assert rows[("accounts", "alice", "balance")] == 994
    assert rows[("accounts", "bob", "balance")] == 6
    assert sorted(rows[("accounts", "alice", "history")]) == [-1] * 6


def test_changed_code_under_an_unfinished_request_is_detected(store: Store, api: Api) -> None:
    space = new_space()

    def first(tx: Tx) -> int:
        tx.put("x", 1)
        return 1

    def renamed(tx: Tx) -> int:
        tx.put("x", 2)
        return 2

    def later(tx: Tx) -> None:
        tx.put("y", 1)

    def make(body: Any) -> Idem[Any]:
        return atomic("items", space + "p", body).then(atomic("items", space + "p", later))

    crash_second = FaultyStore(store, before_step(2))
    with pytest.raises(SimulatedCrash):
        api.run(make(first), request_id="nd", store=crash_second)
    with pytest.raises(NonDeterminismError) as caught:
        api.run(make(renamed), request_id="nd", store=store)
    assert caught.value.step == 1 and "first" in caught.value.recorded and "renamed" in caught.value.met
    assert rows_of(store, space) == {("items", "p", "x"): 1}


def test_deterministic_helpers_are_stable_across_replays(store: Store, api: Api) -> None:
    calls: list[str] = []

    def notify(key: str) -> str:
        calls.append(key)
        return f"sent-{len(calls)}"

    @workflow("helpers")
    def helpers(n: int) -> Generator[Idem[Any], Any, Any]:
        t = yield now()
        u = yield uuid4()
        r = yield random()
        sent = yield effect(notify)
        yield atomic("items", "helpers", lambda tx: tx.increment("n"))
        return {"t": t, "u": u, "r": r, "sent": sent}

    crash_last = FaultyStore(store, before_step(5))
    with pytest.raises(SimulatedCrash):
        api.run(helpers(1), request_id="h", store=crash_last)
    again = api.run(helpers(1), request_id="h", store=store)
    assert again == api.run(helpers(1), request_id="h", store=store)
    assert calls == [calls[0]] and len(calls[0]) == 64
    assert 0 <= again["r"] < 1 and len(again["u"]) == 36
    assert again["u"] != api.run(helpers(1), request_id="h2", store=store)["u"]


def test_an_effect_first_is_not_called_again_by_duplicates_of_a_finished_request(
    store: Store, api: Api
) -> None:
    """The first step is an effect: a duplicate must learn that the request finished
    before it calls out, even though no step body of it ever reads a row."""
    calls: list[str] = []

    @workflow("mailer")
    def mailer(who: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(lambda key: calls.append(key) or f"sent to {who}", name="send"))

    request_id = "mail-" + uuid.uuid4().hex
    # Its one commit (the effect's answer with the outcome) applies, and its answer is lost.
    lost_answer = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.kind == "commit" else None)
    with pytest.raises(SimulatedCrash):
        api.run(mailer("ann"), request_id=request_id, store=lost_answer)
    for _ in range(3):
        assert api.run(mailer("ann"), request_id=request_id, store=store) == "sent to ann"
    store.flush()
    assert api.run(mailer("ann"), request_id=request_id, store=store) == "sent to ann"
    assert len(calls) == 1


def test_increment_get_delete_semantics(store: Store, api: Api) -> None:
    def body(tx: Tx) -> list[Any]:
        tx.increment("n", 2)
        tx.increment("n", 3)
        seen = tx.get("n")
        tx.put("gone", "x")
        tx.delete("gone")
        return [seen, tx.get("gone", "default")]

    space = new_space()
    assert api.run(atomic("items", space + "p", body), request_id="i", store=store) == [5, "default"]
    assert rows_of(store, space) == {("items", "p", "n"): 5}


def test_long_workflow_with_loop_replays_after_crash(store: Store, api: Api) -> None:
    space = new_space()

    @workflow("loop")
    def loop(n: int) -> Generator[Idem[Any], Any, int]:
        total = 0
        for i in range(n):
            total = yield atomic("items", space + str(i % 3), lambda tx, i=i: tx.increment("n", i) or i)
            if i % 2 == 0:
                yield atomic("items", space + "even", lambda tx: tx.increment("evens"))
        return total

    crash = FaultyStore(store, lambda p: Fault.CRASH_AFTER if p.index in (5, 17) else None)
    assert run_until_done(api, loop(20), "loop", crash) == 19
    rows = rows_of(store, space)
    assert rows[("items", "even", "evens")] == 10
    assert sum(v for (t, p, k), v in rows.items() if k == "n") == sum(range(20))  # type: ignore[misc]


def test_idempotent_handler(store: Store) -> None:
    space = new_space()

    @idempotent(store, key=lambda order: order["id"])
    def place(order: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
        yield atomic("items", space + "orders", lambda tx: tx.increment("placed"))
        return "placed " + order["id"]

    assert [place({"id": "o1"}) for _ in range(3)] == ["placed o1"] * 3
    assert place({"id": "o2"}) == "placed o2"
    assert rows_of(store, space) == {("items", "orders", "placed"): 2}


@pytest.mark.exact_calls  # it counts calls: DynamoDB Local's injected conflicts would add some
@pytest.mark.blocking_api
def test_duplicate_of_finished_request_costs_one_round_trip(store: Store, api: Api) -> None:
    space = new_space()
    m = atomic("items", space + "a", lambda tx: tx.put("k", 1)).then(
        atomic("items", space + "b", lambda tx: tx.put("k", 2))
    )
    api.run(m, request_id="dup", store=store)
    store.flush()
    before = store.round_trips
    api.run(m, request_id="dup", store=store)
    store.flush()
    # One call; Azure needs a read after its failed insert to see the record.
    limit = 1 if store.capabilities.cross_partition_commit else 2
    assert store.round_trips - before <= limit


def _read_first(store: Store) -> int:
    """The read of the run record ``run`` makes first where reads are local (a duplicate's answer)."""
    return 1 if store.capabilities.local_reads else 0


@pytest.mark.exact_calls
@pytest.mark.blocking_api
def test_first_run_costs_one_commit_per_step(store: Store, api: Api) -> None:
    space = new_space()
    steps = [atomic("items", space + str(i), lambda tx, i=i: tx.put("k", i)) for i in range(4)]
    m = steps[0].then(steps[1]).then(steps[2]).then(steps[3])
    before = store.round_trips
    api.run(m, request_id="cost", store=store)
    store.flush()
    # The outcome rides in the last step's commit; Azure: the claim and the outcome alone.
    extra = 0 if store.capabilities.cross_partition_commit else 2
    assert store.round_trips - before == 4 + extra + _read_first(store)


@pytest.mark.exact_calls
@pytest.mark.blocking_api
@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_workflow_costs_one_call_per_step_with_its_outcome_in_the_last(
    store: Store, n: int, api: Api
) -> None:
    """The last step's commit carries the outcome, and the outcome is in the store when the
    caller has its answer: no completion write is left to a background thread."""
    space = new_space()

    @workflow("per-step")
    def per_step(k: int) -> Generator[Idem[Any], Any, Any]:
        total = 0
        for i in range(k):
            total += yield atomic("items", f"{space}{i}", lambda tx, i=i: tx.put("k", i) or i)
        return total

    before = store.round_trips
    assert api.run(per_step(n), request_id=space, store=store) == sum(range(n))
    made = store.round_trips - before
    record = run_status(store, "per-step", space)
    assert record is not None and record.status is RunStatus.COMPLETED
    extra = 0 if store.capabilities.cross_partition_commit else 2  # Azure: the claim, the outcome
    assert made == n + extra + _read_first(store)


@pytest.mark.blocking_api
def test_a_step_whose_commit_waited_and_lost_its_data_runs_again_on_fresh_data(
    store: Store, api: Api
) -> None:
    """Between a step and its commit the workflow goes on; if the rows the step read change in
    that time, the commit is refused and the request starts over from what is committed."""
    space, poked = new_space(), []

    def copy(tx: Tx) -> int:
        seen = tx.get("n", 0)
        tx.put("copy", seen)
        return int(seen)

    @workflow("fresh")
    def fresh(key: str) -> Generator[Idem[Any], Any, Any]:
        seen = yield atomic("items", space + "p", copy)
        if not poked:  # another writer moves the row on before the step's commit
            poked.append(True)
            api.run(
                atomic("items", space + "p", lambda tx: tx.increment("n", 5)),
                request_id=space + "w",
                store=store,
            )
        return seen

    result = api.run(fresh("x"), request_id=space, store=store)
    rows = rows_of(store, space)
    assert rows[("items", "p", "copy")] == result and rows[("items", "p", "n")] == 5
    assert api.run(fresh("x"), request_id=space, store=store) == result


@pytest.mark.blocking_api
def test_a_duplicate_that_finishes_while_the_first_waits_to_commit_wins_once(store: Store, api: Api) -> None:
    """A copy of the request runs to its end between the first's step and that step's commit:
    the first's commit is refused and it answers as the copy did, the step applied once."""
    space, copies, answers = new_space(), [], []

    @workflow("raced")
    def raced(key: str) -> Generator[Idem[Any], Any, Any]:
        n = yield atomic("items", space + "p", lambda tx: tx.increment("n") or len(copies))
        if not copies:
            copies.append(key)
            answers.append(api.run(raced(key), request_id=space, store=store))  # the copy, to its end
        return n

    first = api.run(raced("x"), request_id=space, store=store)
    assert answers == [first] and rows_of(store, space) == {("items", "p", "n"): 1}


# -- bad input: a typed error, nothing written ------------------------------------


def test_non_json_value_is_refused_before_writing(store: Store, api: Api) -> None:
    space = new_space()

    def body(tx: Tx) -> None:
        tx.put("ok", 1)
        tx.put("bad", {1, 2})

    with pytest.raises(InvalidValueError) as caught:
        api.run(atomic("items", space + "p", body), request_id="bad-value", store=store)
    assert "items" in str(caught.value) and "bad" in str(caught.value)
    assert rows_of(store, space) == {}


@pytest.mark.parametrize("result", [(1, 2), {1: "a"}, float("nan"), object()])
def test_non_json_result_is_refused_before_writing(store: Store, result: object, api: Api) -> None:
    space = new_space()

    def body(tx: Tx) -> object:
        tx.put("k", 1)
        return result

    with pytest.raises(InvalidValueError):
        api.run(atomic("items", space + "p", body), request_id="bad-result", store=store)
    assert rows_of(store, space) == {}


def test_non_json_input_is_refused(store: Store, api: Api) -> None:
    with pytest.raises(InvalidValueError):
        api.run(transfer({"space": "x", "when": object()}), request_id="bad-input", store=store)


@pytest.mark.parametrize("table", ["", "ab", "has_underscore", "1abc", "x" * 41, 5])
def test_illegal_table_names(table: Any) -> None:
    with pytest.raises(InvalidNameError):
        atomic(table, "p", lambda tx: None)


@pytest.mark.parametrize("partition", ["", "x" * 256, "\ud800", None])
def test_illegal_partitions(partition: Any) -> None:
    with pytest.raises(InvalidNameError):
        atomic("items", partition, lambda tx: None)


@pytest.mark.parametrize("request_id", ["", "x" * 256, 17, "\udfff"])
def test_illegal_request_ids(store: Store, request_id: Any, api: Api) -> None:
    with pytest.raises(InvalidNameError):
        api.run(pure(1), request_id=request_id, store=store)


@pytest.mark.parametrize("key", ["", "k" * 513, 3])
def test_illegal_keys(store: Store, key: Any, api: Api) -> None:
    space = new_space()
    with pytest.raises(InvalidNameError):
        api.run(atomic("items", space + "p", lambda tx: tx.put(key, 1)), request_id="bad-key", store=store)
    assert rows_of(store, space) == {}


@pytest.mark.parametrize("name", ["", "has space", "-dash", "x" * 101, "slash/name"])
def test_illegal_workflow_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        workflow(name)


def test_yielding_a_non_idem_is_refused(store: Store, api: Api) -> None:
    @workflow("yields-junk")
    def junk() -> Generator[Any, Any, None]:
        yield 5

    with pytest.raises(InvalidInputError):
        api.run(junk(), request_id="junk", store=store)


def test_oversize_value_is_refused_before_writing(store: Store, api: Api) -> None:
    space = new_space()
    limit = store.capabilities.max_value_bytes
    size = limit + 10 if limit < 50_000_000 else 100

    def body(tx: Tx) -> None:
        tx.put("small", 1)
        tx.put("big", "x" * size)

    if limit >= 50_000_000:  # memory: no backend limit to exceed
        api.run(atomic("items", space + "p", body), request_id="big", store=store)
        return
    with pytest.raises(LimitExceededError) as caught:
        api.run(atomic("items", space + "p", body), request_id="big", store=store)
    assert "items" in str(caught.value)
    assert rows_of(store, space) == {}


@pytest.mark.exact_calls  # a phantom transaction conflict as the last failure would be reported as such
def test_bounded_conflicts_raise_conflict_error(store: Store, api: Api) -> None:
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_none

    from idemflow.core.policy import DataConflict as _DataConflict

    space = new_space()
    meddler = atomic("items", space + "p", lambda tx: tx.increment("v"))

    def body(tx: Tx) -> None:
        tx.get("v")
        # a writer sneaks in every time (blocking: a body cannot await, on either API)
        idemflow.run(meddler, request_id=str(uuid.uuid4()), store=store)
        tx.put("w", 1)

    policy = RetryPolicy(
        conflicts=Retrying(
            stop=stop_after_attempt(3),
            wait=wait_none(),
            retry=retry_if_exception_type(_DataConflict),
            reraise=True,
        )
    )
    with pytest.raises(ConflictError) as caught:
        api.run(atomic("items", space + "p", body), request_id="conflict", store=store, policy=policy)
    assert caught.value.attempts == 4 and caught.value.partition == space + "p"
    assert ("items", "p", "w") not in rows_of(store, space)
