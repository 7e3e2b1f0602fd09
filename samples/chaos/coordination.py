"""Workload 8: durable timers, child workflows and messages between workflows, killed and faulty.

Worker processes (``python -m samples.chaos worker coordination``: a faulty store that loses
commit answers and injects transient errors and conflicts, an exit right after some commits) on
one SQLite store and queue, SIGKILLed at random while the round runs and replaced
(:class:`~samples._harness.Killer`); clients in threads submit 2-3 copies of every request
through a store that also crashes before and after commits. The workflows
(:mod:`samples.chaos.coordination_flows`) sleep between two steps, start a child and wait for it
(some children abort), and send messages to receivers that receive them with a short timeout
(several senders per receiver, one of them the client itself with ``send_message``; for half the
receivers every sender goes first, so messages wait for a receiver that has not started).

Why a workload of its own: a waiting step holds no worker, so a request lives in the queue's
delayed messages, the outbox and its wake-ups between its steps. A worker killed there, an answer
lost there, must neither lose the request (a sleep that never wakes, a parent never woken, a
message never taken) nor repeat a step. A monitor checks
:func:`~samples.chaos.coordination_flows.invariants` while the round runs, and at its end
:func:`~samples.chaos.coordination_flows.check_round`: every request finished, each step once, no
timer early, each child once and under its parent, each message taken once in its sender's order
and none lost; nothing dead-lettered.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idemflow import Workflow
from idemflow.client import RunStatus, send_message, status, submit
from idemflow.stores import SqliteStore, Store
from idemflow.testing import FaultyStore
from idemflow.worker import Queue, open_queue
from samples._harness import Crashes, Fleet, Killer
from samples.chaos import coordination_flows as flows
from samples.chaos.demos import RoundFiles
from samples.chaos.faults import CLIENT_FAULTS, RETRIED, random_plan
from samples.chaos.monitor import watching
from samples.chaos.report import Options, Totals

WORKERS = 2
RELAY_EVERY = 0.5
"""``--relay-every`` of the workers: how soon a continuation or wake-up whose send was lost goes."""
GRACE = 2.0
"""``submit``'s grace: a client that crashed after its claim and retries at once sends nothing (a
copy within ``submit``'s takeover time enqueues nothing), so the relay sends it this long after
the claim; the default (30 s) stalled a quick round that long."""

Action = Callable[[Store, Queue, str], None]
"""One copy of a request, sent by a client: ``(store, queue, signing key)``."""


@dataclass(frozen=True)
class Job:
    """A request the clients submit (or an outside sender's messages), and what must be accepted
    before its first copy goes (an early receiver waits for its senders)."""

    request_id: str
    action: Action
    after: frozenset[str] = frozenset()


def make_plan(rng: random.Random, prefix: str, quick: bool) -> flows.Plan:
    """The round's requests: naps of 0.2-2 s, parents (a third of their children abort), and
    receivers with three senders of 2-4 messages each: a workflow sending from the client, one
    sending from a worker after a pause (the receiver's timeouts expire meanwhile), and the
    client itself with ``send_message``."""
    plan = flows.Plan()
    size = 1 if quick else 4
    for n in range(6 * size):
        rid = f"{prefix}nap-{n}"
        plan.naps.append((rid, {"id": rid, "seconds": round(rng.uniform(0.2, 2.0), 3)}))
    for n in range(6 * size):
        rid = f"{prefix}parent-{n}"
        plan.parents.append((rid, {"id": rid, "verdict": "abort" if n % 3 == 1 else "ok"}))
    for n in range(2 * size):
        rid = f"{prefix}receiver-{n}"
        expected = 0
        for s in range(2):  # one sends from the client, one from a worker after a pause
            sid, count = f"{rid}.sender-{s}", rng.randint(2, 4)
            pause = 0.0 if s == 0 else round(rng.uniform(0.5, 2.5), 3)
            plan.senders.append(
                (sid, {"id": sid, "to": rid, "count": count, "in_client": s == 0, "pause": pause})
            )
            expected += count
        count = rng.randint(2, 4)
        plan.outside.append((rid, f"{rid}.outside", count))
        plan.receivers.append((rid, {"id": rid, "expected": expected + count, "timeout": 1.0}))
    return plan


def _submitting(flow: Workflow[Any, Any], req: object, request_id: str) -> Action:
    def action(store: Store, queue: Queue, key: str) -> None:
        submit(flow(req), request_id=request_id, store=store, queue=queue, signing_key=key, grace=GRACE)

    return action


def _outside(rid: str, sid: str, count: int) -> Action:
    def action(store: Store, queue: Queue, key: str) -> None:
        for n in range(count):  # one after the other: the receiver takes them in this order
            value = flows.note(sid, n, count)
            send_message(
                store, flows.RECEIVER, rid, flows.TOPIC, value, key=f"{sid}.{n}", queue=queue, signing_key=key
            )

    return action


def make_jobs(plan: flows.Plan, rng: random.Random) -> list[Job]:
    """The jobs in the order their first copies go: the naps, parents and receivers' groups
    shuffled; in half the groups every sender goes before the receiver (and the receiver waits
    until they were accepted), in the others the receiver first."""
    groups = [[Job(rid, _submitting(flows.nap, req, rid))] for rid, req in plan.naps]
    groups += [[Job(rid, _submitting(flows.parent, req, rid))] for rid, req in plan.parents]
    for rid, req in plan.receivers:
        senders = [Job(sid, _submitting(flows.sender, s, sid)) for sid, s in plan.senders if s["to"] == rid]
        senders += [Job(sid, _outside(rid, sid, count)) for to, sid, count in plan.outside if to == rid]
        if rng.random() < 0.5:  # every sender first; the receiver's first copy waits for them
            early = frozenset(job.request_id for job in senders)
            groups.append([*senders, Job(rid, _submitting(flows.receiver, req, rid), early)])
        else:
            groups.append([Job(rid, _submitting(flows.receiver, req, rid)), *senders])
    rng.shuffle(groups)
    return [job for group in groups for job in group]


def copies(jobs: list[Job], rng: random.Random, spread: float = 6.0) -> list[tuple[Job, bool]]:
    """Each job 2-3 times, the copies a few places apart (racing, and after the first finished);
    ``(job, first copy?)``."""
    placed = [(float(n), n, True, job) for n, job in enumerate(jobs)]
    placed += [
        (n + rng.uniform(0.5, spread), n, False, job)
        for n, job in enumerate(jobs)
        for _ in range(rng.randint(1, 2))
    ]
    placed.sort(key=lambda each: (each[0], each[1]))
    return [(job, first) for _position, _n, first, job in placed]


@dataclass
class Clients:
    """Client threads submitting the copies through a faulty store; what was accepted."""

    faulty: FaultyStore
    queue_url: str
    key: str
    accepted: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(
        self, placed: list[tuple[Job, bool]], seconds: float, threads: int = 4
    ) -> list[threading.Thread]:
        """Start ``threads`` clients sending ``placed`` in order, spread over ``seconds``."""
        start, gap = time.monotonic(), seconds / max(1, len(placed))
        todo = list(enumerate(placed))[::-1]

        def client() -> None:
            queue = open_queue(self.queue_url)
            while True:
                with self._lock:
                    if not todo:
                        break
                    n, (job, first) = todo.pop()
                time.sleep(max(0.0, start + n * gap - time.monotonic()))
                waited = time.monotonic() + 60
                while first and not job.after <= self.accepted and time.monotonic() < waited:
                    time.sleep(0.01)
                self._one(queue, job)
            queue.close()

        started = [threading.Thread(target=client, name=f"chaos-client-{n}") for n in range(threads)]
        for thread in started:
            thread.start()
        return started

    def _one(self, queue: Queue, job: Job) -> None:
        for _attempt in range(200):
            try:
                job.action(self.faulty, queue, self.key)
            except RETRIED:
                continue
            with self._lock:
                self.accepted.add(job.request_id)
            return
        with self._lock:
            self.problems.append(f"{job.request_id}: never accepted")


def _settle(
    store: Store,
    requests: list[tuple[str, str]],
    clients: list[threading.Thread],
    deadline: float,
    done: list[int],
) -> list[str]:
    """Wait until the clients are done and every request finished (or ``deadline``); ``done[0]``
    counts the finished ones meanwhile (the killer's progress). The requests that never did."""
    left = set(requests)
    while left and time.monotonic() < deadline:
        for workflow, request_id in sorted(left):
            found = status(store, workflow, request_id)
            if found.status.final or found.status is RunStatus.FAILED:
                left.discard((workflow, request_id))
        done[0] = len(requests) - len(left)
        if left or any(thread.is_alive() for thread in clients):
            time.sleep(0.25)
    for thread in clients:
        thread.join()
    return [
        f"{workflow} {request_id} never finished: {status(store, workflow, request_id)}"
        for workflow, request_id in sorted(left)
    ]


def coordination_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """One round (see the module's docstring)."""
    files = RoundFiles.fresh("coordination", opts, rng, round_no)
    round_rng = random.Random(files.seed)
    store = SqliteStore(files.path)
    store.create_tables(*flows.TABLES)
    plan = make_plan(round_rng, f"r{round_no}-", opts.quick)
    jobs = make_jobs(plan, round_rng)
    placed = copies(jobs, round_rng)
    key = secrets.token_hex(16)
    faulty = FaultyStore(
        store, random_plan(random.Random(round_rng.random()), opts.fault_rate, CLIENT_FAULTS)
    )
    clients = Clients(faulty, files.queue, key)
    argv = ["-m", "samples.chaos", "worker", "coordination", "--store", f"sqlite:{files.path}"]
    argv += ["--queue", files.queue, "--log", str(files.log), "--fault-rate", str(opts.fault_rate)]
    argv += ["--die", "0.01", "--relay-every", str(RELAY_EVERY)]
    fleet = Fleet({"IDEMFLOW_SIGNING_KEY": key})
    requests = plan.requests()
    done = [0]
    killer = Killer(fleet, 4 if opts.quick else 12, len(requests), random.Random(round_rng.random()))
    with watching(files.path, flows.invariants) as monitor:
        try:
            for _ in range(WORKERS):
                fleet.start("worker", argv)
            with killer.watching(lambda: done[0]):
                threads = clients.send(placed, 2.0 if opts.quick else 8.0)
                deadline = time.monotonic() + (60 if opts.quick else 120)
                unfinished = _settle(store, requests, threads, deadline, done)
        finally:
            fleet.stop()
    problems = [*clients.problems, *unfinished, *flows.check_round(store, plan)]
    _summary(store, plan, round_no)
    store.close()
    totals.faults += len(faulty.injected)
    crashes = Crashes(dict(fleet.kills), dict(fleet.exits), 0)
    files.tally(totals, len(jobs), len(placed), crashes, monitor, problems)


def _summary(store: Store, plan: flows.Plan, round_no: int) -> None:
    """A line on what the round went through: how late the timers were (after the ``now()`` before
    the sleep plus its seconds), the children, the mail."""
    late, timeouts = [], 0
    for rid, req in plan.naps:
        result = status(store, flows.NAP, rid).result
        if isinstance(result, dict):
            late.append(
                flows.number(result.get("after")) - flows.number(result.get("before")) - req["seconds"]
            )
    for rid, _req in plan.receivers:
        result = status(store, flows.RECEIVER, rid).result
        timeouts += int(flows.number(result.get("timeouts"))) if isinstance(result, dict) else 0
    aborted = sum(req["verdict"] == "abort" for _rid, req in plan.parents)
    sent = sum(count for senders in plan.expected().values() for count in senders.values())
    print(
        f"[chaos]   coordination round {round_no}: {len(plan.naps)} timers woke "
        f"{min(late, default=0):.2f}-{max(late, default=0):.2f} s late; {len(plan.parents)} children "
        f"({aborted} aborting); {sent} messages to {len(plan.receivers)} receivers, "
        f"{timeouts} receive timeouts",
        flush=True,
    )
