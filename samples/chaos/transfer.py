"""Workloads 1 and 2: the transfer sample killed (its own harness) and through a faulty store.

1. **transfer, killed** — :func:`samples.transfer.demo.run_harness`: transfers sent 2-3 times
   to worker processes on one SQLite file, workers SIGKILLed at random and replaced.
2. **transfer, faulty store** — the same workflow from threads through a
   :class:`~idemflow.testing.FaultyStore`; each copy of a request either runs (``run_result``)
   or is submitted (``submit``) to worker threads; one request in eight carries an input
   larger than the queue's body limit.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from returns.result import Failure, Result, Success

from idemflow import WorkflowAborted
from idemflow.client import Pending
from idemflow.stores import SqliteStore
from idemflow.testing import FaultyStore
from samples.chaos.faults import CLIENT_FAULTS, IN_PROCESS_FAULTS, RETRIED, random_plan
from samples.chaos.monitor import money_holds, watching
from samples.chaos.report import Options, Totals
from samples.chaos.versions import padded, plain
from samples.transfer.demo import reset

GRACE = 2.0
"""``submit``'s grace in the faulty rounds: how soon the relay sends a continuation its client did
not send (the default, 30 s, stalled a quick round that long)."""


def transfer_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    from samples.transfer.demo import Settings, run_harness

    settings = Settings(
        path=opts.workdir / f"transfer-{round_no}.sqlite3",
        workers=3,
        requests=40 if opts.quick else 80,
        accounts=6,
        kills=5 if opts.quick else 10,
        seed=rng.randrange(1 << 30),
        timeout=120.0,
    )
    reset(settings.path)
    with watching(settings.path, money_holds(settings.accounts * settings.balance)) as monitor:
        report = run_harness(settings)
    totals.checks += monitor.checks
    totals.requests += report.requests
    totals.submissions += report.submissions
    totals.kills += report.kills
    problems = [*report.problems, *monitor.problems]
    totals.anomalies += [f"transfer round {round_no} (seed {settings.seed}): {p}" for p in problems]


def transfer_faulty(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    """Each copy of a request either runs (``run_result``) or is submitted (``submit``: the debit
    in the client, the credit, and the refund when the destination is missing, in a worker
    after the checkpoint); clients crash before and after commits, everyone loses answers and
    meets transient errors and conflicts. One request in eight is padded past the queue's body
    limit (:func:`~samples.chaos.versions.padded`)."""
    from idemflow import run, run_result
    from idemflow.client import submit
    from idemflow.worker import MemoryQueue, Worker
    from samples.transfer.demo import Settings, make_requests, make_submissions
    from samples.transfer.workflows import check, ledger, open_account, transfer

    size = 60 if opts.quick else 120
    settings = Settings(
        path=opts.workdir / f"faulty-{round_no}.sqlite3", workers=6, requests=size, accounts=6
    )
    reset(settings.path)
    store = SqliteStore(settings.path)
    faulty = FaultyStore(store, random_plan(random.Random(rng.random()), opts.fault_rate, CLIENT_FAULTS))
    # A worker thread cannot be killed from outside; its store loses answers and conflicts instead.
    worker_plan = random_plan(random.Random(rng.random()), opts.fault_rate, IN_PROCESS_FAULTS)
    worker_store = FaultyStore(store, worker_plan)
    queue = MemoryQueue(visibility_timeout=2.0)
    # A client that crashed after its claim and retries at once sends nothing (a copy within
    # submit's takeover time enqueues nothing): the relay sends it, GRACE after the claim.
    worker = Worker([transfer], store=worker_store, queue=queue, concurrency=2, wait=0.05, relay_every=0.5)
    opening = {f"acct-{n}": settings.balance for n in range(settings.accounts)}
    for name, balance in opening.items():
        run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
    requests = padded(make_requests(settings, rng))
    submissions = [(request, rng.random() < 0.5) for request in make_submissions(requests, settings, rng)]
    answers: dict[str, list[Any]] = {}
    pendings: list[tuple[str, Pending]] = []
    lock = threading.Lock()
    todo = list(reversed(submissions))
    anomalies: list[str] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                (request_id, req), asynchronous = todo.pop()
            for _attempt in range(200):
                try:
                    if asynchronous:
                        m = transfer(req)
                        pending = submit(m, request_id=request_id, store=faulty, queue=queue, grace=GRACE)
                    else:
                        outcome = run_result(transfer(req), request_id=request_id, store=faulty)
                except RETRIED:
                    continue
                with lock:
                    if asynchronous:
                        pendings.append((request_id, pending))  # its answer is polled for at the end
                    else:
                        answers.setdefault(request_id, []).append(outcome)
                break
            else:
                anomalies.append(f"{request_id} never finished")

    working = threading.Thread(target=worker.run)
    with watching(settings.path, money_holds(sum(opening.values()))) as monitor:
        working.start()
        threads = [threading.Thread(target=client) for _ in range(settings.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        deadline, unfinished = time.monotonic() + 120, set()
        for request_id, pending in pendings:
            final = polled(pending, deadline)
            if final is None:
                unfinished.add(request_id)
            else:
                answers.setdefault(request_id, []).append(final)
        worker.stop()
        working.join()
    anomalies += [f"{rid} submitted but never finished by a worker" for rid in sorted(unfinished)]
    anomalies += [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
    outcomes = {}
    for request_id, req in requests:
        got = answers.get(request_id, [])
        if any(other != got[0] for other in got[1:]):
            anomalies.append(f"{request_id}: copies answered differently: {got}")
        if got:
            outcomes[request_id] = (plain(req), got[0])
    verdict = check(store, opening=opening, outcomes=outcomes)
    books = ledger(store)
    store.close()
    totals.requests += len(requests)
    totals.submissions += len(submissions)
    totals.oversize += sum("padding" in req for _request_id, req in requests)
    totals.faults += len(faulty.injected) + len(worker_store.injected)
    problems = [*anomalies, *monitor.problems, *verdict.problems, *books.problems]
    totals.checks += monitor.checks
    totals.anomalies += [f"faulty round {round_no}: {problem}" for problem in problems]


def polled(pending: Pending, deadline: float) -> Result[Any, WorkflowAborted] | None:
    """What a client polling a submitted transfer until ``deadline`` learns, as ``run_result``
    would have answered it; None if no worker finished it by then."""
    try:
        return Success(pending.result(timeout=max(0.0, deadline - time.monotonic())))
    except WorkflowAborted as aborted:
        return Failure(aborted)
    except TimeoutError:
        return None
