"""``idemflow.testing``: check_workflow, its report, the pytest plugin and the CONFLICT fault.

The checker must pass correct workflows (the transfer sample, an asynchronous
survey, aborts with compensation) and catch, deterministically, each way a
workflow can break exactly-once around its steps.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from idemflow import (
    Idem,
    StepRetry,
    Tx,
    all_of,
    any_of,
    atomic,
    checkpoint,
    close_stream,
    effect,
    now,
    open_store,
    receive,
    run,
    set_event,
    sleep,
    uuid4,
    workflow,
    write_stream,
)
from idemflow.client import rows
from idemflow.stores import MemoryStore, SqliteStore, Store
from idemflow.stores.base import Check, Committed, Cond, Conflict, Increment, Insert, Put, RowRef
from idemflow.stores.registry import STORES
from idemflow.testing import (
    CheckReport,
    Fault,
    FaultPoint,
    FaultyStore,
    SimulatedCrash,
    check_workflow,
)
from idemflow.testing.plugin import IdemflowCheck
from idemflow.testing.plugin import (
    idemflow_check as idemflow_check,
)  # the fixture, until conftest loads the plugin
from idemflow.testing.servers import ServerPool
from samples.transfer.workflows import open_account, transfer
from tests.conftest import make_factory
from tests.support.async_workflows import survey

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs/examples/checking_workflows.py"


def open_accounts(store: Store) -> None:
    for name in ("alice", "bob"):
        run(open_account({"account": name, "balance": 100}), request_id=f"open-{name}", store=store)


TRANSFERS = [
    {"src": "alice", "dst": "bob", "amount": 30},
    {"src": "alice", "dst": "carol", "amount": 30},  # aborts after the debit: the refund runs
    {"src": "alice", "dst": "bob", "amount": 3000},  # aborts at once
]


# -- correct workflows pass -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_transfer_sample_passes_every_scenario(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    report = check_workflow(transfer, TRANSFERS, make_factory(kind, request, tmp_path), setup=open_accounts)
    assert report.ok, report
    assert report.inputs == 3 and report.scenarios >= 40
    assert str(report).startswith("workflow 'transfer': ")


@pytest.mark.cloud
@pytest.mark.backend("dynamodb")
def test_the_checker_runs_against_a_cloud_store(
    idemflow_check: IdemflowCheck, idemflow_servers: ServerPool, tmp_path: Path
) -> None:
    """As docs/testing.md shows it: stores on the server of the registry's test bed, through
    the plugin's fixtures."""
    _, bed = STORES.bed("dynamodb")  # moto; "dynamodb-local" meets the service's conflicts
    server = idemflow_servers.get(bed.server)

    def fresh_store() -> Store:
        store = open_store(server.store_url(f"chk{uuid.uuid4().hex[:8]}", tmp_path))
        store.create_tables("accounts", "transfers")
        return store

    report = idemflow_check(
        transfer, TRANSFERS[:1], setup=open_accounts, store_factory=fresh_store, faults=[Fault.CRASH_AFTER]
    )
    assert report.ok, report


def test_asynchronous_workflows_are_checked_through_submit_and_a_worker() -> None:
    inputs = [
        {"space": "", "user": "u", "answer": "yes", "at": [1]},
        {"space": "", "user": "u", "answer": "no", "at": [0, 2], "abort": True},
    ]
    report = check_workflow(survey, inputs, faults=[*Fault])
    assert report.ok, report
    assert report.skipped == ()


def test_events_and_streams_are_checked_as_readers_see_them() -> None:
    """Every crash point, lost answer, duplicate and race (``submit`` and a worker too) publishes
    each stream value once and leaves each event as one failure-free run sets it; a workflow that
    publishes what is not a step result is caught."""

    @workflow("check-publisher")
    def publisher(n: int) -> Any:
        yield set_event("stage", "writing")
        yield checkpoint()
        for i in range(n):
            yield write_stream("log", i)
        yield set_event("stage", "done")
        yield close_stream("log")
        return n

    report = check_workflow(publisher, [3], faults=[*Fault])
    assert report.ok, report
    assert report.skipped == ()
    published: list[int] = []

    @workflow("check-leaky-publisher")
    def leaky(n: int) -> Any:
        published.append(n)  # state outside the store, published
        yield set_event("runs", len(published))

    assert not check_workflow(leaky, [1]).ok


def test_all_of_and_any_of_pass_every_scenario() -> None:
    """Every crash point, lost answer, duplicate and race, and the ``submit``-and-worker path, end
    as one failure-free run: the branches' memos are found whatever order they ended in, and an
    ``any_of`` keeps the winner it decided."""

    @workflow("check-together")
    def together(n: int) -> Any:
        got = yield all_of(*(effect(lambda key, k=k: k * n, name=f"quote-{k}") for k in range(3)))
        yield checkpoint()
        index, value = yield any_of(effect(lambda key: "fast", name="fast"), sleep(60))
        yield atomic("counters", "c", lambda tx: tx.increment("n", sum(got) + index), name="add")
        return [got, index, value]

    report = check_workflow(together, [1, 2], faults=[*Fault])
    assert report.ok, report
    assert report.skipped == ()


def test_plain_idem_computations_are_checked_without_the_asynchronous_scenarios() -> None:
    def step(n: int) -> Idem[int]:
        return atomic("counters", "c", lambda tx: tx.increment("n", n) or n).bind(
            lambda got: atomic("counters", "d", lambda tx: tx.put("last", got) or got)
        )

    assert check_workflow(step, [1, 2]).ok


def test_now_after_a_checkpoint_skips_only_the_asynchronous_scenarios() -> None:
    @workflow("stamp")
    def stamp(who: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        at = yield now()
        yield atomic("stamps", who, lambda tx: tx.put("at", at))
        return at

    report = check_workflow(stamp, ["ann"])
    assert report.ok, report
    assert report.skipped and "wall clock" in report.skipped[0]


class RealWait(BaseException):
    """A checked run slept on the real clock: past the checker's retries, out of the test."""


@pytest.fixture
def no_real_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's waits must pass on its own clock: a real wait of a second or more (a timer,
    a timeout, a backoff) fails the test at once instead of hanging it (conflict backoffs, of
    milliseconds, still sleep)."""
    real = time.sleep

    def sleep(seconds: float) -> None:
        if seconds >= 1.0:
            raise RealWait(f"a real wait of {seconds} s")
        real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)


@workflow("renewal")
def renewal(who: str) -> Generator[Idem[Any], Any, Any]:
    yield atomic("subscriptions", who, lambda tx: tx.increment("periods"))
    yield checkpoint()
    yield sleep(30 * 86400)  # a month: far past any real wait
    cancelled = yield receive("cancel", timeout=3600)
    yield atomic("subscriptions", who, lambda tx: tx.increment("periods") if cancelled is None else None)
    return "renewed" if cancelled is None else "cancelled"


@pytest.mark.usefixtures("no_real_waits")
def test_sleeps_and_receive_timeouts_pass_on_the_checkers_own_clock() -> None:
    report = check_workflow(renewal, ["ann"])
    assert report.ok, report
    assert report.skipped == ()  # the asynchronous scenarios ran too: submit and a worker


@pytest.mark.usefixtures("no_real_waits")
def test_now_after_a_sleep_is_the_reference_time_moved_by_the_sleep() -> None:
    @workflow("stamped-nap")
    def stamped_nap(who: str) -> Generator[Idem[Any], Any, Any]:
        before = yield now()
        yield sleep(600)
        after = yield now()
        yield atomic("stamps", who, lambda tx: tx.put("slept", after - before))
        return after

    made: list[MemoryStore] = []

    def fresh() -> MemoryStore:
        made.append(MemoryStore())
        return made[-1]

    report = check_workflow(stamped_nap, ["ann"], fresh)
    assert report.ok, report
    assert {rows(store, "stamps", "ann")[("ann", "slept")] for store in made} == {600.0}


@pytest.mark.usefixtures("no_real_waits")
def test_a_retry_backoff_is_counted_without_a_wait_and_its_policy_still_ends() -> None:
    tries: dict[str, int] = {}

    def flaky(key: str) -> str:
        tries[key] = tries.get(key, 0) + 1
        if tries[key] <= 2:
            raise TimeoutError("the provider is slow")
        return "charged"

    def down(key: str) -> str:
        raise TimeoutError("the provider is down")

    @workflow("backing-off")
    def backing_off(who: str) -> Generator[Idem[Any], Any, Any]:
        charged = yield effect(flaky, retry=StepRetry(initial=60))
        yield atomic("charges", who, lambda tx: tx.put("charged", charged))
        return charged

    @workflow("given-up")
    def given_up(who: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(down, retry=StepRetry(initial=600, expiry=3600)))  # no attempt cap

    assert check_workflow(backing_off, ["ann"]).ok
    report = check_workflow(given_up, ["ann"])
    assert report.ok, report  # every scenario ends with the same error once the policy ended


# -- broken workflows are caught ---------------------------------------------------------------------


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "checking_workflows", ROOT / "docs/examples/checking_workflows.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_passed_between_steps_in_python_state_is_caught_at_a_crash() -> None:
    example = load_example()
    report = check_workflow(example.buy_leaky, example.ORDERS, setup=example.open_wallet)
    assert not report.ok and report.first_divergence is not None
    divergence = report.first_divergence
    assert divergence.scenario.startswith("the process dies just after commit #0 applied")
    assert divergence.expected.outcome.value == {"charged": 5}
    assert divergence.actual.outcome.value == {"charged": 0}
    assert divergence.actual.rows[("receipts", "ann", "o-1")] == 0
    with pytest.raises(AssertionError, match="receipts/ann/'o-1': expected 5, actual 0"):
        report.raise_on_failure()
    assert check_workflow(example.buy, example.ORDERS, setup=example.open_wallet).ok


def test_a_body_with_a_side_effect_is_caught_when_a_conflict_reruns_it() -> None:
    runs: list[int] = []  # process state a body changes (a counter, a cache, a sent mail)

    @workflow("count-runs")
    def count_runs(who: str) -> Generator[Idem[Any], Any, Any]:
        def body(tx: Tx) -> None:
            runs.append(1)  # counts body runs: a conflict makes two
            tx.put("seen", tx.get("seen", 0) + 1)

        yield atomic("visits", who, body)
        yield atomic("visits", who + "-log", lambda tx: tx.put("runs", len(runs)))

    report = check_workflow(count_runs, ["ann"], faults=[Fault.CONFLICT], setup=lambda _store: runs.clear())
    assert not report.ok and report.first_divergence is not None
    assert "concurrent writer" in report.first_divergence.scenario
    assert "expected 1, actual 2" in report.first_divergence.trace


def test_uuid_clock_and_random_outside_steps_are_caught_by_a_clean_rerun() -> None:
    import random as stdlib_random

    @workflow("order")
    def order_with_uuid(item: str) -> Generator[Idem[Any], Any, Any]:
        order_id = str(uuid.uuid4())  # differs on every execution
        yield atomic("orders", item, lambda tx: tx.put(order_id, 1))

    @workflow("order")
    def order_with_clock(item: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("orders", item, lambda tx: tx.put("at", time.time()))

    @workflow("order")
    def order_with_random(item: str) -> Generator[Idem[Any], Any, Any]:
        shard = f"shard{stdlib_random.randrange(1 << 30)}"
        yield atomic("orders", shard, lambda tx: tx.put(item, 1))

    for flow in (order_with_uuid, order_with_clock, order_with_random):
        report = check_workflow(flow, ["book"])
        assert report.first_divergence is not None
        assert report.first_divergence.scenario == "a failure-free rerun on a fresh store"
        assert "not deterministic" in report.first_divergence.trace

    @workflow("order")
    def order_fixed(item: str) -> Generator[Idem[Any], Any, Any]:
        order_id = yield uuid4()
        at = yield now()
        yield atomic("orders", item, lambda tx: tx.put(order_id, at))

    assert check_workflow(order_fixed, ["book"]).ok


def test_a_leak_across_the_checkpoint_is_caught() -> None:
    @workflow("vote")
    def vote(ballot: dict[str, str]) -> Generator[Idem[Any], Any, Any]:
        picked: dict[str, str] = {}

        def record(tx: Tx) -> None:
            picked["choice"] = ballot["choice"]  # gone when a worker resumes after the checkpoint
            tx.put(ballot["voter"], ballot["choice"])

        yield atomic("ballots", ballot["poll"], record)
        yield checkpoint()
        yield atomic("tally", ballot["poll"], lambda tx: tx.increment(picked.get("choice", "lost")))

    report = check_workflow(vote, [{"poll": "p", "voter": "v", "choice": "yes"}])
    assert report.first_divergence is not None
    # A worker resuming after the checkpoint shows it, and so does any execution that replays
    # the first step from its memo (a retry after a crash): whichever scenario comes first.
    assert "+ tally/p/'lost' = 1 extra" in report.first_divergence.trace


def test_racing_executions_that_disagree_are_caught() -> None:
    runs = itertools.count()

    @workflow("race")
    def race(who: str) -> Generator[Idem[Any], Any, Any]:
        mine = next(runs)
        yield atomic("races", who, lambda tx: tx.put("winner", mine) or mine)
        return mine  # each execution returns its own number

    report = check_workflow(race, ["ann"], faults=[])
    assert report.first_divergence is not None


def test_a_report_lists_what_happened() -> None:
    example = load_example()
    report = check_workflow(example.buy_leaky, example.ORDERS, setup=example.open_wallet)
    trace = str(report)
    assert "injected crash-after at commit #0:" in trace
    assert "put wallets/ann row 'balance' = 95 (if still version 1)" in trace
    assert "execution 1: SimulatedCrash" in trace and "execution 2: completed" in trace
    assert "hint: " in trace


def test_check_workflow_validates_its_options() -> None:
    with pytest.raises(ValueError, match="duplicates"):
        check_workflow(transfer, [], duplicates=1)
    assert check_workflow(transfer, []) == CheckReport("transfer", True, 0, 0)


# -- the CONFLICT fault ----------------------------------------------------------------------------


@pytest.mark.exact_calls
def test_conflict_fault_bumps_a_read_row_and_the_body_reruns(store: Store) -> None:
    space = f"c{uuid.uuid4().hex[:6]}"
    run(atomic("accounts", space, lambda tx: tx.put("n", 1)), request_id=space + "seed", store=store)
    runs: list[int] = []

    def add(tx: Tx) -> int:
        runs.append(1)
        tx.put("n", tx.get("n") + 1)
        return int(tx.get("n"))

    def once(point: FaultPoint) -> Fault | None:  # the step's commit (on Azure the run record goes first)
        data = any(op.ref.table == "accounts" for op in point.ops)
        return Fault.CONFLICT if data and not faulty.injected else None

    faulty = FaultyStore(store, once)
    assert run(atomic("accounts", space, add), request_id=space, store=faulty) == 2
    assert len(runs) == 2 and [fault for _, fault in faulty.injected] == [Fault.CONFLICT]
    assert rows(store, "accounts", space) == {(space, "n"): 2}


def test_conflict_fault_needs_something_to_conflict_with() -> None:
    store = MemoryStore()
    faulty = FaultyStore(store, lambda point: Fault.CONFLICT)
    memo = Insert(RowRef("tablea", "p", "mw|r|s1"), 1, "1")
    assert isinstance(faulty.commit([memo, Increment(RowRef("tablea", "p", "dn"), 1)]), Committed)
    assert faulty.injected == []  # increments and memo inserts cannot conflict
    assert isinstance(faulty.commit([Check(RowRef("tablea", "p", "dx"), Cond.ABSENT)]), Conflict)
    assert len(faulty.injected) == 1
    assert isinstance(faulty.commit([Put(RowRef("tablea", "p", "dn"), 5, "5", 1)]), Conflict)
    assert rows(store, "tablea") == {("p", "n"): 1}  # the bump kept the value


# -- the pytest plugin and the documentation ---------------------------------------------------------


def test_the_fixture_passes_good_workflows_and_fails_with_the_trace(idemflow_check: IdemflowCheck) -> None:
    example = load_example()
    assert idemflow_check(example.buy, example.ORDERS, setup=example.open_wallet).ok
    with pytest.raises(AssertionError, match="diverged from its failure-free run"):
        idemflow_check(example.buy_leaky, example.ORDERS, setup=example.open_wallet)


def test_the_plugin_works_in_a_users_test_suite(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["idemflow.testing.plugin"]\n')
    (tmp_path / "test_user.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('ex', {str(EXAMPLE)!r})\n"
        "ex = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(ex)\n"
        "def test_fixed(idemflow_check):\n"
        "    idemflow_check(ex.buy, ex.ORDERS, setup=ex.open_wallet)\n"
        "def test_leaky(idemflow_check):\n"
        "    idemflow_check(ex.buy_leaky, ex.ORDERS, setup=ex.open_wallet)\n"
    )
    for store in ("memory", "sqlite"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--idemflow-store={store}",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
        assert "receipts/ann/'o-1': expected 5, actual 0" in done.stdout


def test_testing_docs_show_the_example_as_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs/testing.md").read_text()
    source = EXAMPLE.read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        assert block in source, block  # every code block is part of the runnable example
    leaky, fixed = load_example().main()
    assert not leaky.ok and fixed.ok
    shown = re.findall(r"```text\n(.*?)```", text, flags=re.DOTALL)
    assert shown and shown[0].rstrip("\n") == str(leaky)


def test_sqlite_factory_files_are_separate(tmp_path: Path) -> None:
    from idemflow.testing.plugin import sqlite_factory

    make = sqlite_factory(tmp_path)
    first, second = make(), make()
    assert isinstance(first, SqliteStore) and first is not second
    first.close()
    second.close()


def test_effects_outside_the_store_run_at_least_once_with_one_key() -> None:
    """What idemflow does not promise: an effect whose commit was lost runs again (same key)."""
    from idemflow import effect

    calls: list[str] = []

    def send(idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return "sent"

    @workflow("mail")
    def mail(who: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(send, name="send"))

    store = FaultyStore(MemoryStore(), lambda point: Fault.CRASH_BEFORE if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):
        run(mail("ann"), request_id="m-1", store=store)
    assert run(mail("ann"), request_id="m-1", store=store) == "sent"
    assert len(calls) == 2 and calls[0] == calls[1]  # at least once, never with a new key


def test_a_duplicate_of_a_finished_request_never_calls_its_effect_again() -> None:
    from idemflow import effect

    calls: list[str] = []

    @workflow("mail")
    def mail(who: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(lambda key: calls.append(key) or "sent", name="send"))

    store = MemoryStore()
    for _ in range(3):
        assert run(mail("ann"), request_id="m-1", store=store) == "sent"
    assert len(calls) == 1


def test_every_guarantee_links_to_a_test_that_exists() -> None:
    text = (ROOT / "docs/guarantees.md").read_text()
    links = re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", text)
    assert len(links) > 30
    current = ""
    for path, name in links:
        current = path or current
        source = (ROOT / current).read_text()
        assert re.search(rf"^def {name}\(", source, flags=re.MULTILINE), f"{current}::{name}"


def test_a_crash_after_a_commit_happens_even_when_the_backend_first_refused_it_transiently() -> None:
    """On DynamoDB a commit may meet a transaction conflict: "crash after" still means after it applied."""
    refusing = FaultyStore(MemoryStore(), lambda point: Fault.TRANSIENT if point.index == 0 else None)
    dying = FaultyStore(refusing, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
    with pytest.raises(SimulatedCrash):
        run(atomic("accounts", "a", lambda tx: tx.put("n", 1)), request_id="r", store=dying)
    assert rows(refusing.inner, "accounts") == {("a", "n"): 1}
    assert [fault for _point, fault in refusing.injected] == [Fault.TRANSIENT]
