"""Limits across processes: 2 ``idemflow worker`` processes x 4 threads share one store.

One of the two runs on an event loop (``--asyncio``).
A workflow with ``concurrency=2``, and a provider call that two other workflows make under a
limit group of 2 (``effect(..., group=)``), count themselves in an outside SQLite table (entry,
exit, the most ever inside: :mod:`tests.support.limit_workflows`); slot holders of both are SIGKILLed
mid-call and replaced. Never more than 2 are inside either, every request completes once, and a
killed holder's slot comes back after its lease (two holders of each limit of 2 are killed: a
slot that never came back would leave it full for good). That 2 are inside at some moment is
forced, not hoped for: a call stays (for at most a third of its lease) until a second one was
inside with it, since on a loaded machine short calls may otherwise never overlap, and the test
submits two more requests at a time until they met. A 2/s rate starts at most ``2 + 2 * T``
requests in any ``T`` seconds, by the start times the requests' own ``now()`` steps read. On
SQLite (files), DynamoDB on moto and on DynamoDB Local, and Azure Tables on Azurite, each beside
a queue.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from idemflow import open_store, run
from idemflow.client import RunStatus, status, submit
from idemflow.limits.slots import holders, slots_ref
from idemflow.stores import Store
from idemflow.stores.base import Put
from idemflow.stores.registry import Feature
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from idemflow.worker import open_queue
from tests.conftest import TEST_TABLES, paired_queue_url, store_kinds
from tests.conftest import store_url as url_of
from tests.support import limit_workflows
from tests.support.limit_workflows import (
    HELD_PROVIDER,
    PACE,
    booking,
    connect,
    create,
    held,
    paced,
    pair,
    refunding,
    stats,
    take_out,
)
from tests.support.workflows import rows_of

KEY = "limits-test-key"
WORKERS, THREADS = 2, 4
SLACK = 1.0
"""Seconds a request's ``now()`` may read after its token was taken. Between the two come the
clearing of its waiting note (a read and a conditional write) and the step's own turn; with the
suite's other process tests beside it on 2 cores, a store call can wait a second. A limiter that
held nothing would still be far over: 12 starts within a second or two, against ``2 + 2 * (T + 1)``."""


def start_worker(store_url: str, queue_url: str, counter: Path, asyncio: bool) -> subprocess.Popen[bytes]:
    """An ``idemflow worker`` process of 8 threads, or of 8 tasks on an event loop."""
    env = {**os.environ, "IDEMFLOW_SIGNING_KEY": KEY, limit_workflows.FILE_ENV: str(counter)}
    command = [
        sys.executable,
        "-m",
        "idemflow.cli",
        "worker",
        "tests.support.limit_workflows:WORKFLOWS",
        "--store",
        store_url,
        "--queue",
        queue_url,
        "--concurrency",
        str(THREADS),
        "--idle-timeout",
        "20",
        *(["--asyncio"] if asyncio else []),
    ]
    log = open(counter.with_suffix(f".{time.monotonic_ns()}.log"), "wb")  # noqa: SIM115
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)


def backends(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Store, str, str]:
    prefix = f"l{uuid.uuid4().hex[:8]}"
    store_url = url_of(kind, request, prefix, tmp_path, exact=False)
    queue_url = paired_queue_url(kind, request, prefix, tmp_path, visibility_timeout=2)
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES)
    return store, store_url, queue_url


def wait_for(store: Store, workflow: str, ids: list[str], seconds: float) -> None:
    """Until every request of ``ids`` completed (each looked at until it did, not every time)."""
    deadline, left = time.monotonic() + seconds, list(ids)
    while time.monotonic() < deadline:
        left = [rid for rid in left if status(store, workflow, rid).status is not RunStatus.COMPLETED]
        if not left:
            return
        time.sleep(0.3)
    raise AssertionError(f"{len(left)} of {len(ids)} {workflow} requests not completed: {left}")


FLOWS = {"pair": (pair,), "provider": (booking, refunding)}
"""The workflows counted as each kind."""


def more(store: Store, queue: Any, submitted: dict[str, int], kinds: list[str]) -> list[tuple[str, str]]:
    """Two more requests of each workflow counted as ``kinds``: ``(workflow, request id)``.
    ``submitted`` counts each workflow's requests (ids ``p0``, ``b0``, ``r0``, ...) and grows."""
    sent: list[tuple[str, str]] = []
    for flow in (flow for kind in kinds for flow in FLOWS[kind]):
        name = flow.name
        for n in range(submitted[name], submitted[name] + 2):
            submit(flow(n), request_id=f"{name[0]}{n}", store=store, queue=queue, signing_key=KEY)
            sent.append((name, f"{name[0]}{n}"))
        submitted[name] += 2
    return sent


def until_two_met(store: Store, queue: Any, counter: Path, submitted: dict[str, int]) -> None:
    """Two more requests of a kind at a time until two of that kind were inside at once (the
    peak), with a generous deadline: that the limit of 2 is reached is a liveness figure, which a
    loaded machine may delay (an entry waits for company only a third of its lease) but never
    denies."""
    deadline = time.monotonic() + 180
    for kind in FLOWS:
        while stats(str(counter))[kind][1] < 2:
            assert time.monotonic() < deadline, f"two {kind} calls were never inside at once"
            for name, rid in more(store, queue, submitted, [kind]):
                wait_for(store, name, [rid], 120)


@pytest.mark.slow
@pytest.mark.parametrize("kind", store_kinds(Feature.SHARED))
def test_a_concurrency_of_two_holds_across_workers_and_sigkilled_holders(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store, store_url, queue_url = backends(kind, request, tmp_path)
    counter = tmp_path / "inside.sqlite3"
    create(str(counter))
    queue = open_queue(queue_url)
    submitted = {"pair": 10, "booking": 5, "refunding": 5}
    for n in range(submitted["pair"]):
        submit(pair(n), request_id=f"p{n}", store=store, queue=queue, signing_key=KEY)
    for n in range(submitted["booking"]):  # 10 calls to the provider, from two workflows
        submit(booking(n), request_id=f"b{n}", store=store, queue=queue, signing_key=KEY)
        submit(refunding(n), request_id=f"r{n}", store=store, queue=queue, signing_key=KEY)
    chooser = random.Random(5)
    workers = [start_worker(store_url, queue_url, counter, asyncio=i == 1) for i in range(WORKERS)]
    killed: dict[str, int] = {"pair": 0, "provider": 0}
    try:
        deadline = time.monotonic() + 120
        quiet_since = time.monotonic()
        while min(killed.values()) < 2 and time.monotonic() < deadline:  # kill holders of both
            by_pid = {w.pid: i for i, w in enumerate(workers)}
            inside = [(pid, kind) for pid, kind in limit_workflows.holders(str(counter)) if pid in by_pid]
            wanted = [(killed[kind], kind, by_pid[pid]) for pid, kind in inside if killed[kind] < 2]
            if not wanted:
                if time.monotonic() - quiet_since > 8:  # they may all have finished: more to kill
                    more(store, queue, submitted, [k for k, n in killed.items() if n < 2])
                    quiet_since = time.monotonic()
                time.sleep(0.02)
                continue
            # the kind killed less first, so both kinds' holders die while they hold; of its
            # holders, the worker holding the most of what is still to die (a kill counts all
            # it held, and both slots of a limit dying at once is the hardest case for leases)
            fewest = min(count for count, _, _ in wanted)
            held = Counter(i for _, _, i in wanted)
            chosen = sorted({i for count, _, i in wanted if count == fewest})
            most = max(held[i] for i in chosen)
            victim = chooser.choice([i for i in chosen if held[i] == most])
            pid = workers[victim].pid
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            take_out(str(counter), pid)
            for _, kind in filter(lambda entry: entry[0] == pid, inside):  # all it held died with it
                killed[kind] += 1
            workers[victim] = start_worker(store_url, queue_url, counter, asyncio=victim == 1)
            time.sleep(chooser.uniform(0.3, 1.0))
            quiet_since = time.monotonic()
        assert min(killed.values()) >= 2, killed
        for flow, count in submitted.items():
            wait_for(store, flow, [f"{flow[0]}{n}" for n in range(count)], 180)
        until_two_met(store, queue, counter, submitted)
    finally:
        queue.close()
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
    counted = stats(str(counter))
    assert counted["pair"] == (0, 2), f"inside, peak of a workflow limited to 2: {counted['pair']}"
    assert counted["provider"] == (0, 2), f"inside, peak of a call limited to 2: {counted['provider']}"
    store.flush()
    assert rows_of(store, "pair") == {("tablea", str(n), "done"): 1 for n in range(submitted["pair"])}
    assert rows_of(store, "booking") == {
        ("tablea", str(n), key): 1 for n in range(submitted["booking"]) for key in ("held", "done")
    }
    assert rows_of(store, "refunding") == {
        ("tablea", str(n), "done"): 1 for n in range(submitted["refunding"])
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", store_kinds(Feature.SHARED))
def test_a_rate_of_two_a_second_holds_across_workers(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store, store_url, queue_url = backends(kind, request, tmp_path)
    counter = tmp_path / "starts.sqlite3"
    create(str(counter))
    queue = open_queue(queue_url)
    requests = 12
    ids = [f"r{n}" for n in range(requests)]
    for n, rid in enumerate(ids):
        submit(paced(n), request_id=rid, store=store, queue=queue, signing_key=KEY)
    workers = [start_worker(store_url, queue_url, counter, asyncio=i == 1) for i in range(WORKERS)]
    try:
        wait_for(store, "paced", ids, 120)
    finally:
        queue.close()
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
    starts = sorted(at for (at,) in connect(str(counter)).execute("SELECT at FROM starts"))
    assert len(starts) == requests
    burst, per_second = PACE.capacity, PACE.per_second
    # A start is read by the request's first step, a moment after its token was taken: SLACK
    # seconds of that moment are allowed, so a start read late does not look early (a window's
    # first start read late makes the window look shorter than its tokens' window was).
    worst = max(
        (j - i + 1) - (burst + per_second * (starts[j] - starts[i] + SLACK))
        for i in range(len(starts))
        for j in range(i, len(starts))
    )
    assert worst <= 1e-6, f"{worst:.3f} starts over {burst} + {per_second}/s in some window"
    # It did hold them back: the tokens span (requests - burst) / rate seconds (5 s), and the first
    # start may be read up to SLACK after its token (a loaded machine read it 0.1 s late: 4.89 s of 5).
    assert starts[-1] - starts[0] >= (requests - burst) / per_second - SLACK


def _kept(store: Store) -> dict[str, int]:
    """The slots of ``held``'s two limits still held now."""
    limits = {"workflow": held.limits[0], "provider": HELD_PROVIDER.limit}
    return {kind: len(holders(store.read(slots_ref(limit)), time.time())) for kind, limit in limits.items()}


def _after_the_call(point: FaultPoint) -> Fault | None:
    """Crash before the commit that gives the provider's slot back: the first one after the call
    (the only write of its slots row that leaves it empty, whatever conflicts came before)."""
    ref = slots_ref(HELD_PROVIDER.limit)
    given_back = any(
        isinstance(op, Put) and op.ref == ref and op.value == {"holders": {}} for op in point.ops
    )
    return Fault.CRASH_BEFORE if given_back else None


@pytest.mark.slow
@pytest.mark.parametrize("kind", store_kinds(Feature.SHARED))
def test_a_simulated_crash_keeps_the_slots_a_sigkilled_process_keeps(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The real thing first: a process SIGKILLed inside a call under its workflow's limit and a
    provider's group. Then ``SimulatedCrash`` raised at that point, and ``FaultyStore``'s crash at
    the first commit after the call: each leaves the same slots held (they used to give the
    workflow's slot back on their way out, which a killed process never does)."""
    store, store_url, _ = backends(kind, request, tmp_path)
    ready = tmp_path / "inside"
    code = (
        "from idemflow import open_store, run; from tests.support.limit_workflows import held; "
        f"run(held('wait'), request_id='h-1', store=open_store({store_url!r}))"
    )
    env = {**os.environ, limit_workflows.READY_ENV: str(ready)}
    killed = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert killed.poll() is None, killed.stderr.read() if killed.stderr else ""
            assert time.monotonic() < deadline, "the process never reached the call"
            time.sleep(0.02)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    by_kill = _kept(store)
    assert by_kill == {"workflow": 1, "provider": 1}
    for how in ("crash", "return"):
        simulated = backends(kind, request, tmp_path)[0]
        dies = simulated if how == "crash" else FaultyStore(simulated, _after_the_call)
        with pytest.raises(SimulatedCrash):
            run(held(how), request_id="h-1", store=dies)
        assert _kept(simulated) == by_kill, how
