"""The scenarios :func:`~idemflow.testing.check_workflow` runs for one input: the reference run,
then every rerun, fault, crash, lost completion, race and asynchronous path, each compared with
the reference's outcome and rows.

``check_workflow`` is the public face (its options, its inputs, the report); how one input is
put through every scenario is this module's :class:`Checker`, which holds that input's state
(its reference commits, the scenarios counted, the first divergence).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from typing import Any

from idemflow.async_worklist.messages import resolve_signing_key
from idemflow.async_worklist.outbox import DEFAULT_GRACE, relay
from idemflow.client import status, submit
from idemflow.engine.execution import Plan as ExecutionPlan
from idemflow.engine.monad import Idem
from idemflow.errors import ConflictError, TransientError
from idemflow.records import Memo, RunStatus
from idemflow.running.request_spec import describe, describe_request
from idemflow.running.runner import execute
from idemflow.running.workflows import Workflow
from idemflow.stores.base import Insert, Store
from idemflow.testing._plans import (
    FAULT_TEXT,
    RACING,
    RERUN,
    CacheLosingStore,
    CheckOptions,
    CrashAfterProgress,
    MovedClock,
    at_commit,
    hint,
    injected,
    never,
    recorder,
    snapshot,
)
from idemflow.testing.faults import Fault, FaultPoint, FaultyStore, Plan, SimulatedCrash
from idemflow.testing.report import Divergence, Outcome, Snapshot
from idemflow.worker import MemoryQueue, Worker

_RETRIED = (SimulatedCrash, TransientError, ConflictError)


class Checker:
    """One input of one workflow: the reference and every scenario against it."""

    def __init__(self, options: CheckOptions, index: int, given: object) -> None:
        self.o = options
        self.given = given
        self.request_id = f"{options.request_id}-{index}"
        self.scenarios = 0
        self.divergence: Divergence | None = None
        self.name = "?"
        self.checkpoint_steps: list[int] = []
        self.skipped: str | None = None
        self.clock = MovedClock(options.clock)

    # -- running ---------------------------------------------------------------

    def make(self) -> Idem[Any]:
        return self.o.wf(copy.deepcopy(self.given))

    def fresh(self) -> Store:
        """A new scenario: an empty store, and the clock back at its start."""
        self.clock = MovedClock(self.o.clock)
        store = self.o.store_factory()
        if self.o.setup is not None:
            self.o.setup(store)
        return store

    def execute_once(self, store: Store, plan: ExecutionPlan | None = None) -> Outcome:
        record = execute(
            self.make(),
            request_id=self.request_id,
            store=store,
            policy=self.o.policy,
            clock=self.clock,
            plan=plan,
        )
        if record.status is RunStatus.ABORTED:
            return Outcome("aborted", record.reason)
        return Outcome("completed", record.result)

    def until_done(self, store: Store, events: list[str], who: str = "execution") -> Outcome:
        """Run, retrying after crashes and transient failures, as a supervisor would."""
        for attempt in range(1, self.o.max_attempts + 1):
            try:
                outcome = self.execute_once(store)
            except _RETRIED as exc:
                events.append(f"{who} {attempt}: {type(exc).__name__}: {exc}; retried")
                continue
            except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
                outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
            events.append(f"{who} {attempt}: {outcome}")
            return outcome
        return Outcome("error", f"not finished after {self.o.max_attempts} executions")

    # -- the reference -----------------------------------------------------------

    def reference(self) -> tuple[Snapshot, list[FaultPoint]]:
        commits: list[FaultPoint] = []
        store = self.fresh()
        counting = FaultyStore(store, recorder(commits))
        self.name = describe(self.make())[0]

        version = describe_request(self.make()).version
        observing = ExecutionPlan(version=version, observe_checkpoint=self.checkpoint_steps.append)

        try:
            try:
                outcome = self.execute_once(counting, observing)
            except Exception as exc:  # noqa: BLE001 - compared like any outcome
                outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
            return snapshot(store, outcome), commits
        finally:
            store.close()

    # -- comparing -----------------------------------------------------------------

    def compare(
        self, expected: Snapshot, scenario: str, store: Store, outcomes: Sequence[Outcome], events: list[str]
    ) -> bool:
        """Record the divergence if any outcome or the store differs; True if all is well."""
        self.scenarios += 1
        try:
            actual = snapshot(store, outcomes[0])
        finally:
            store.close()
        odd = next((outcome for outcome in outcomes if outcome != expected.outcome), None)
        if odd is not None:
            actual = Snapshot(odd, actual.rows, actual.bookkeeping)
        if odd is None and actual.rows == expected.rows and actual.bookkeeping == expected.bookkeeping:
            return True
        self.divergence = Divergence(
            self.name, self.given, self.request_id, scenario, tuple(events), expected, actual, hint(scenario)
        )
        return False

    def faulty_run(self, expected: Snapshot, scenario: str, plan: Plan, kind: type = FaultyStore) -> bool:
        store = self.fresh()
        faulty = kind(store, plan)
        events: list[str] = []
        outcome = self.until_done(faulty, events)
        events[:0] = [injected(point, fault) for point, fault in faulty.injected]
        return self.compare(expected, scenario, store, [outcome], events)

    # -- the scenarios ---------------------------------------------------------------

    def check(self) -> None:
        expected, commits = self.reference()
        n = len(commits)
        events: list[str] = []
        store = self.fresh()
        outcome = self.until_done(store, events)
        if not self.compare(expected, RERUN, store, [outcome], events):
            return
        for i in range(n):
            for fault in self.o.faults:
                scenario = FAULT_TEXT[fault].format(i=i) + f" (of {n} commits); retried until done"
                if not self.faulty_run(expected, scenario, at_commit(i, fault)):
                    return
        scenario = "a crash after every commit that applied (one commit of progress per execution)"
        if n > 1 and not self.faulty_run(expected, scenario, never, CrashAfterProgress):
            return
        if not self.lost_completion(expected) or not self.racing(expected, crash=False):
            return
        if n > 0 and not self.racing(expected, crash=True):
            return
        if self.checkpoint_steps and isinstance(self.o.wf, Workflow):
            self.asynchronous(expected, commits)

    def lost_completion(self, expected: Snapshot) -> bool:
        store = self.fresh()
        events: list[str] = []
        first = self.until_done(CacheLosingStore(store, lambda point: None), events)
        events[-1] += " (its completion record lost)"
        second = self.until_done(store, events, who="duplicate")
        return self.compare(
            expected, "completion record lost, then a duplicate", store, [first, second], events
        )

    def racing(self, expected: Snapshot, *, crash: bool) -> bool:
        count = self.o.duplicates
        store = self.fresh()
        barrier = threading.Barrier(count)
        outcomes: list[Outcome] = [Outcome("error", "never ran")] * count
        logs: list[list[str]] = [[] for _ in range(count)]

        def contender(k: int) -> None:
            target: Store = store
            if crash:
                fault = Fault.CRASH_AFTER if k % 2 == 0 else Fault.CRASH_BEFORE
                target = FaultyStore(store, at_commit(k, fault))
            barrier.wait()
            outcomes[k] = self.until_done(target, logs[k], who=f"racer {k}, execution")

        threads = [threading.Thread(target=contender, args=(k,)) for k in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        scenario = f"{RACING} {count} concurrent executions of the request"
        if crash:
            scenario += ", racer k crashing after (k even) or before (k odd) its commit #k"
        return self.compare(expected, scenario, store, outcomes, [line for log in logs for line in log])

    def asynchronous(self, expected: Snapshot, commits: list[FaultPoint]) -> None:
        memos = [Memo.from_json(op.value) for point in commits for op in point.ops if isinstance(op, Insert)]
        if any(memo is not None and memo.identity == "now" for memo in memos):
            self.skipped = "asynchronous scenarios: submit() and Worker read now() from the wall clock"
            return
        store = self.fresh()
        seen: list[FaultPoint] = []
        events: list[str] = []
        outcome = self.drain(FaultyStore(store, recorder(seen)), events)
        if not self.compare(
            expected, "submit() then a Worker (asynchronous variant)", store, [outcome], events
        ):
            return
        total = len(seen)
        for i in range(total):
            for fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER):
                store = self.fresh()
                faulty = FaultyStore(store, at_commit(i, fault))
                events = []
                outcome = self.drain(faulty, events)
                events[:0] = [injected(point, fault) for point, fault in faulty.injected]
                scenario = (
                    "asynchronous: " + FAULT_TEXT[fault].format(i=i) + f" (of {total}, submit and worker)"
                )
                if not self.compare(expected, scenario, store, [outcome], events):
                    return
        store = self.fresh()
        events = []
        outcome = self.drain(store, events, submits=2, redeliver=True)
        scenario = "asynchronous: submitted twice, then the message delivered once more after it finished"
        self.compare(expected, scenario, store, [outcome], events)

    def drain(self, store: Store, events: list[str], *, submits: int = 1, redeliver: bool = False) -> Outcome:
        """Submit (retrying crashes), then deliver messages to a Worker until the queue is empty."""
        now = [0.0]
        queue = MemoryQueue(visibility_timeout=60, clock=lambda: now[0])
        key = self.o.signing_key
        for _ in range(submits):
            for attempt in range(1, self.o.max_attempts + 1):
                try:
                    submit(
                        self.make(),
                        request_id=self.request_id,
                        store=store,
                        queue=queue,
                        signing_key=key,
                        clock=self.clock,
                    )
                except _RETRIED as exc:
                    events.append(f"submit {attempt}: {type(exc).__name__}: {exc}; retried")
                    continue
                except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
                    return Outcome("error", f"{type(exc).__name__}: {exc}")
                events.append(f"submit {attempt}: returned, {queue.approximate_size()} message(s) queued")
                break
        assert isinstance(self.o.wf, Workflow)
        worker = Worker(
            [self.o.wf],
            store=store,
            queue=queue,
            signing_key=key,
            policy=self.o.policy,
            max_deliveries=100,
            clock=self.clock,
        )
        handled: str | None = None
        relayed = False
        for _ in range(self.o.max_attempts):
            received = queue.receive()
            if not received:
                if queue.approximate_size() > 0:
                    now[0] += 61  # the held message's visibility expires
                    continue
                if not relayed:  # a submit that died before its send is finished by the relay
                    relayed = True
                    signing = resolve_signing_key(key)
                    sent = relay(store, queue, signing_key=signing, clock=_past_the_grace)
                    if sent:
                        events.append(f"the outbox relay sent {sent} continuation(s) a submit left")
                        continue
                if not _redeliver(redeliver, handled, queue):
                    break
                redeliver = False
                events.append("the same message delivered once more")
                continue
            message = received[0]
            try:
                worker.handle(message)
                handled = message.body
                events.append(f"worker: handled delivery {message.deliveries} of message {message.id[:8]}")
            except SimulatedCrash as crash:
                events.append(f"worker died: {crash}; the message comes back after its visibility timeout")
                now[0] += 61
        events += [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
        state = status(store, self.name, self.request_id)
        if state.status is RunStatus.COMPLETED:
            return Outcome("completed", state.result)
        if state.status is RunStatus.ABORTED:
            return Outcome("aborted", state.reason)
        return Outcome("error", f"unfinished: status {state.status.value}")


def _past_the_grace() -> float:
    """A relay's clock for a request whose submit died before its send: its entry is due."""
    return time.time() + DEFAULT_GRACE + 1


def _redeliver(redeliver: bool, body: str | None, queue: MemoryQueue) -> bool:
    """Send ``body`` again if asked and there is one (a late duplicate delivery)."""
    if not redeliver or body is None:
        return False
    queue.send(body)
    return True
