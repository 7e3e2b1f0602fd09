"""The chaos suite: the samples under sustained load while processes are killed and commits misbehave.

``python -m samples.chaos --minutes 10`` (``make chaos``) repeats eleven
workloads until the time is up, each checked continuously while it runs and
exactly at its end (``--only NAME`` runs those whose names start with NAME):

1. **transfer, killed** (:mod:`samples.chaos.transfer`) — the bank-transfer
   sample's own harness (:func:`samples.transfer.demo.run_harness`): transfers
   submitted 2-3 times to worker processes on one SQLite file, workers
   SIGKILLed at random and replaced; money conserved, every balance and audit
   row as one replay of the completed transfers, one refund per compensated
   transfer.
2. **transfer, faulty store** (:mod:`samples.chaos.transfer`) — the same
   workflow from threads through a :class:`~idemflow.testing.FaultyStore`
   that loses commit answers, injects transient errors and conflicts and
   crashes before and after commits; duplicates and reordered requests. Each
   copy either runs or is submitted: then the debit runs in the client and the
   rest after the checkpoint in worker threads, so a transfer to a missing
   account aborts and refunds its debit in a worker (compensation after a
   checkpoint) while copies of it run elsewhere. One request in eight carries
   an input larger than the queue's body limit. A monitor checks while it runs
   that no money appears and no balance goes negative; at the end the sample's
   ``check`` and ``ledger``, and nothing may be dead-lettered.
3. **transfer, deploy** (:mod:`samples.chaos.deploy`) — version 2 of the
   transfer (:mod:`samples.chaos.versions`: a ``screen`` step first) deployed
   while version 1 requests are in flight: worker processes on one SQLite
   store and queue, SIGKILLed at random and exiting after some commits, are
   replaced by workers holding only version 2 while clients still submit
   version 1, then the clients switch to version 2, then the workers hold
   both. Every request must finish on the version it started with (its result
   and ``status().version`` say which; the screenings per account equal the
   version 2 requests), version 1 requests wait meanwhile
   (``status().waiting``), nothing is dead-lettered; oversize inputs and
   clients that die after their claim (the outbox relay sends) included.
4. **survey** and 5. **auction**, asynchronous (:mod:`samples.chaos.demos`) —
   the samples' own demos (:func:`samples.survey.cli.run_demo`,
   :func:`samples.auction.cli.run_demo`): API servers answering at the
   checkpoint and worker processes finishing the workflows, on one SQLite
   store and queue; every request sent 2-4 times, copies racing on different
   servers and reordered; servers and workers SIGKILLed at random and
   restarted. Here the servers and workers run over a faulty store
   (:class:`~samples.chaos.faults.DyingStore`) that loses commit answers and
   injects transient errors and conflicts, and the workers also exit right
   after some commits — the one kill point a SIGKILL from outside cannot aim
   at — to be restarted like a supervisor would. While the load runs, a
   monitor checks the sample's invariants that hold at every instant
   (``check(store, settled=False)``: nothing counted twice, no winner charged
   twice, no money created); at the end the demo checks what the clients saw
   and ``check`` the tables (every response counted once; one winner per
   closed auction, charged once; money conserved; every accepted bid counted
   once in ``popular``), and nothing may be dead-lettered.
6. **survey** and 7. **auction on DynamoDB Local** (:mod:`samples.chaos.demos`)
   — workloads 4 and 5 with the store on AWS's own engine, which the run
   starts on a free loopback port (``--no-dynamodb-local`` skips them), and
   every process meeting the service's transaction conflicts
   (``conflicts=0.05`` in the store URL: overlapping transactions on an item
   cancelled, plus 5% phantoms; :mod:`idemflow.testing.conflicts`).
8. **coordination** (:mod:`samples.chaos.coordination`, the workflows in
   :mod:`samples.chaos.coordination_flows`) — durable timers, child workflows
   and messages, where a request lives between its steps in the queue's
   delayed messages, the outbox and its wake-ups: worker processes on one
   SQLite store and queue (faulty stores, exiting after some commits,
   SIGKILLed at random and restarted) and clients in threads submitting 2-3
   copies of each request through a store that also crashes. Naps sleep
   0.2-2 s between two steps, parents start a child and wait for it (a third of
   the children abort: the parent catches ``ChildAborted``), senders (one of
   them the client, with ``send_message``) send 2-4 messages each to
   receivers that receive with a 1 s timeout until they have them all, half
   of the receivers submitted only after their senders. The monitor and the
   end check: each step once, no timer early, each child once and under its
   parent (whose result says what the child did), each message taken once in
   its sender's order and none lost (taken + still waiting = sent), every
   request finished, nothing dead-lettered.
9. **payments** (:mod:`samples.chaos.payments`; the saga in
   :mod:`samples.chaos.payments_flows`, the provider in
   :mod:`samples.chaos.payments_provider`, the checks in
   :mod:`samples.chaos.payments_checks`) — outside calls: a booking saga
   holds a seat, charges the card with ``effect(charge, compensate=refund,
   timeout=, retry=StepRetry(...))``, waits for a confirmation and takes a
   meal (sold out for some), run by worker processes (faulty stores, exiting
   after some commits, SIGKILLed at random and restarted) against a fake
   payment provider in the driver process, outside the workers, that goes down
   for 2-30 s at a time, declines some cards (non-retryable), answers some
   calls later than the timeout and SIGKILLs its caller right at an effect
   boundary now and then; every request submitted 2-3 times, some never
   confirmed, some aborted by an operator (``idemflow.admin.abort_request``)
   while in flight, some right after their worker was SIGKILLed inside the
   charge (which the provider writes to its books a moment later). Checked
   while it runs and at the end: every charge in the provider's books belongs
   to a completed request or is refunded exactly once (never twice, never a
   refund of a charge never made), every request ended, seats and meals held
   equal the completed bookings. A second table gives the provider's side:
   charges, refunds, declines, outages, late answers, operators' aborts.
10. **flow control** (:mod:`samples.chaos.limits`, the workflows in
   :mod:`samples.chaos.limits_flows`) — a workflow with ``concurrency=2``,
   and a supplier's call that two workflows make under a limit group of 2
   (``effect(..., group=)``), each counting itself in an outside table,
   submitted 2-3 times per request to 3 worker processes of 8 threads; worker
   processes holding a slot are SIGKILLed mid-request and replaced (their
   slots come back after the lease). A monitor reads the counts over and
   over: more than 2 inside either at any moment, a request left unfinished
   or a step applied twice is an anomaly.
11. **reading and together** (:mod:`samples.chaos.reading`; the jobs in
   :mod:`samples.chaos.reading_flows`, the provider in
   :mod:`samples.chaos.reading_provider`, the readers in
   :mod:`samples.chaos.reading_readers`, the checks in
   :mod:`samples.chaos.reading_checks`) — what a running request publishes and
   what it does at once: a job sets its ``stage`` event six times (values
   derived from its input), writes a stream of 6-40 values and closes it,
   starts a kid now and then (released by the job at its end), makes three
   quotes at once with ``all_of`` at a fake provider in the driver process,
   outside the workers, that keeps its books by idempotency key (slow calls,
   transient refusals, answers lost after the call was made, late answers),
   and waits in ``any_of(receive("nudge"), sleep(...))``. Worker processes
   (faulty stores, exiting after some commits, SIGKILLed at random and right
   after the provider recorded their call) on one SQLite store and queue;
   clients submit 2-3 copies of every job. Meanwhile a reader per job follows
   its events with ``get_event`` and reads its stream from offset 0 with
   ``read_stream`` (half with the asyncio twins), the client nudges half the
   jobs (before they wait, while they wait, or after their sleep ended), and
   an operator cancels a share with ``cancel(..., children=True)`` (half with
   ``acancel``): mid-stream, while their quotes are in flight, while they
   wait, at any moment. Checked while it runs and at
   the end: no event seen going back, every completed job's event at its last
   value and its stream read complete, in order, each value once (a cancelled
   job's, a prefix); each quote made once per ``(request, branch)`` at the
   provider, every completed job's three made and answered as recorded; the
   nudge won where it was sent before the sleep ended, else the sleep (the
   run found a nudge sent after the sleep's end winning when a worker took the
   request late; fixed);
   cancelled jobs and their kids ``cancelled``, ``result()`` raising
   ``RequestCancelledError``; every other job and kid completed; nothing
   dead-lettered. A third table gives the readers' and the provider's side.

The summary table goes to ``benchmarks/results/chaos.md``; the exit status
is 1 if any anomaly was found. ``--quick`` runs smaller rounds (the test
suite's short run). It is a tool of this repository, run from its root; the
child processes are ``python -m samples.chaos serve|worker ...``
(:mod:`samples.chaos.children`).

>>> from samples.chaos import Totals
>>> Totals("demo", requests=3, submissions=5).duplicates
2
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from samples.chaos.cli import WORKLOADS, main, run_chaos
    from samples.chaos.faults import DIED, DyingStore, random_plan
    from samples.chaos.monitor import Monitor, money_holds, watching
    from samples.chaos.report import Options, Totals, render

_HOMES = {
    "WORKLOADS": "cli",
    "main": "cli",
    "run_chaos": "cli",
    "DIED": "faults",
    "DyingStore": "faults",
    "random_plan": "faults",
    "Monitor": "monitor",
    "money_holds": "monitor",
    "watching": "monitor",
    "Options": "report",
    "Totals": "report",
    "render": "report",
}
"""Where each name lives: imported on first use, so a child process (``python -m samples.chaos
worker ...``) imports only what it runs."""

__all__ = [
    "DIED",
    "WORKLOADS",
    "DyingStore",
    "Monitor",
    "Options",
    "Totals",
    "main",
    "money_holds",
    "random_plan",
    "render",
    "run_chaos",
    "watching",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
