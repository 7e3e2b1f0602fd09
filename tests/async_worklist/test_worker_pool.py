"""The worker pool (``idemflow worker --processes MIN:MAX``) and the queue stats it follows.

The scaling policy is a pure function, checked with generated readings; the
supervisor is checked with real processes (a stand-in command, then real
workers on SQLite and on SQS in moto): it grows from 1 to MAX under a burst
of requests that hold their threads until released, replaces a SIGKILLed
worker, and shrinks back to MIN once quiet. Every wait is for a condition
the pool writes in its status file, with a generous timeout; no assertion is
on elapsed time (benchmarks/pool.py measures that).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemflow import open_store
from idemflow.async_worklist.pool.supervisor import Pool, parse_processes
from idemflow.cli.pool import worker_argv
from idemflow.client import RunStatus, status, submit
from idemflow.errors import InvalidValueError
from idemflow.testing.servers import Azurite, Moto
from idemflow.worker import (
    BacklogPolicy,
    MemoryQueue,
    PoolView,
    Queue,
    QueueStats,
    Scaling,
    aqueue_stats,
    open_queue,
    queue_stats,
)
from tests.conftest import TEST_TABLES
from tests.support.pool_workflows import held
from tests.support.workflows import rows_of

TIMEOUT = 120.0


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- the policy: a pure function ---------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=500)
readings = st.builds(
    lambda v, d, f, lag: QueueStats("q", v, d, f, v + d + f, lag),
    counts,
    counts,
    counts,
    st.none() | st.floats(min_value=0, max_value=3600),
)


@st.composite
def views(draw: st.DrawFn) -> PoolView:
    minimum = draw(st.integers(1, 8))
    maximum = draw(st.integers(minimum, 16))
    last_change = draw(st.floats(0, 1000))
    times = sorted(draw(st.lists(st.floats(last_change, last_change + 200), min_size=1, max_size=8)))
    samples = tuple((at, draw(readings)) for at in times)
    size = draw(st.integers(minimum, maximum))
    return PoolView(size, minimum, maximum, draw(st.integers(1, 16)), times[-1], last_change, samples)


policies = st.builds(
    BacklogPolicy,
    per_thread=st.floats(0.1, 10),
    lag=st.none() | st.floats(0.1, 60),
    cooldown=st.floats(0, 120),
    settle=st.floats(0, 30),
)


@given(views(), policies)
def test_the_policy_stays_in_bounds_and_moves_for_a_reason(view: PoolView, policy: BacklogPolicy) -> None:
    answer = policy(view)
    assert view.minimum <= answer.target <= view.maximum
    if answer.target < view.size:  # shrinking: only after a quiet cooldown
        assert view.now - view.last_change >= policy.cooldown
        assert answer.reason.startswith("quiet")
    if answer.target > view.size:
        wanted = policy.wanted(view.stats, view.concurrency)
        assert wanted > view.size or (view.stats.lag or 0) > (policy.lag or float("inf"))


@given(views(), policies)
def test_the_policy_grows_when_the_work_outnumbers_the_threads(view: PoolView, policy: BacklogPolicy) -> None:
    wanted = min(policy.wanted(view.stats, view.concurrency), view.maximum)
    if wanted > view.size:
        assert policy(view).target == wanted


@given(st.integers(1, 4), st.integers(0, 12), st.integers(1, 8), st.floats(1, 60))
def test_the_policy_shrinks_to_the_minimum_after_a_quiet_cooldown(
    minimum: int, extra: int, concurrency: int, cooldown: float
) -> None:
    idle = QueueStats("q", visible=0, delayed=3, in_flight=0, total=3)  # delayed work needs no thread
    samples = tuple((float(t), idle) for t in range(0, int(cooldown) + 2))
    view = PoolView(minimum + extra, minimum, minimum + extra, concurrency, samples[-1][0], 0.0, samples)
    assert policy_target(BacklogPolicy(cooldown=cooldown), view) == minimum


@given(st.integers(1, 4), st.integers(1, 8))
def test_the_policy_never_grows_on_an_empty_queue(size: int, concurrency: int) -> None:
    empty = QueueStats("q", visible=0, delayed=0, in_flight=0, total=0, lag=None)
    view = PoolView(size, 1, 8, concurrency, 5.0, 0.0, ((5.0, empty),))
    assert BacklogPolicy().__call__(view).target <= size


@given(
    st.integers(1, 3),
    st.integers(0, 8),
    st.integers(1, 8),
    st.integers(1, 400),
    st.floats(0.5, 120),
    st.floats(0, 60),
    st.floats(0.1, 5),
)
def test_a_load_step_moves_the_pool_up_once_and_back_down_once(
    minimum: int, extra: int, concurrency: int, work: int, load_for: float, cooldown: float, every: float
) -> None:
    """Sampled as the supervisor samples (the samples kept since the last change): a steady load
    grows the pool once, to what it needs; once it stops, one cooldown later the pool is back at
    its minimum in one step. No flapping either way."""
    policy = BacklogPolicy(cooldown=cooldown, lag=None)
    maximum = minimum + extra
    busy = QueueStats("q", visible=work, delayed=0, in_flight=0, total=work)
    idle = QueueStats("q", visible=0, delayed=0, in_flight=0, total=0)
    size, last_change, samples, changes, now = minimum, 0.0, [], [], 0.0
    while now < load_for + cooldown + 2 * every:
        samples.append((now, busy if now < load_for else idle))
        view = PoolView(size, minimum, maximum, concurrency, now, last_change, tuple(samples))
        target = view.clamp(policy(view).target)
        if target != size:
            changes.append((size, target))
            size, last_change, samples = target, now, samples[-1:]
        now += every
    needed = min(max(policy.wanted(busy, concurrency), minimum), maximum)
    assert changes == ([(minimum, needed), (needed, minimum)] if needed > minimum else [])
    assert size == minimum


def test_a_burst_that_pauses_within_the_cooldown_keeps_the_pool() -> None:
    busy = QueueStats("q", visible=20, delayed=0, in_flight=4, total=24)
    idle = QueueStats("q", visible=0, delayed=0, in_flight=0, total=0)
    view = PoolView(3, 1, 3, 4, 40.0, 0.0, ((20.0, busy), (35.0, idle), (40.0, idle)))
    assert BacklogPolicy(cooldown=30).__call__(view).target == 3
    later = PoolView(3, 1, 3, 4, 60.0, 0.0, ((20.0, busy), (35.0, idle), (60.0, idle)))
    assert BacklogPolicy(cooldown=30).__call__(later) == Scaling(
        1, "quiet: at most 1 worker(s) needed for 30s"
    )


def test_lag_alone_grows_the_pool_by_one() -> None:
    slow = QueueStats("q", visible=1, delayed=0, in_flight=0, total=1, lag=45.0)
    view = PoolView(2, 1, 4, 8, 100.0, 90.0, ((100.0, slow),))
    assert BacklogPolicy(lag=10).__call__(view).target == 3
    assert BacklogPolicy(lag=None).__call__(view).target == 2
    assert BacklogPolicy(lag=10, settle=20).__call__(view).target == 2  # new processes settle first
    full = PoolView(4, 1, 4, 8, 100.0, 0.0, ((100.0, slow),))
    assert BacklogPolicy(lag=10).__call__(full).target == 4  # a lagging queue never shrinks the pool
    assert BacklogPolicy(lag=None).__call__(full).target == 1


def policy_target(policy: BacklogPolicy, view: PoolView) -> int:
    return policy(view).target


def test_bad_pool_options_are_refused_before_anything_starts() -> None:
    assert parse_processes("2:5") == (2, 5)
    for text in ("0:3", "3:2", "x", "1:999", ""):
        with pytest.raises(InvalidValueError):
            parse_processes(text)
    with pytest.raises(InvalidValueError):
        BacklogPolicy(cooldown=-1)
    for every in (0, -1, 3600):
        with pytest.raises(InvalidValueError, match="--scale-every"):
            Pool(
                ["true"],
                minimum=1,
                maximum=2,
                concurrency=1,
                read_stats=lambda: QueueStats("q", 0, 0, 0, 0),
                policy=BacklogPolicy(),
                sample_every=every,
            )
    assert worker_argv(["worker", "a:b", "--processes=1:2", "--scaling", "m:p", "--queue", "q"]) == [
        "worker",
        "a:b",
        "--queue",
        "q",
    ]


# -- the supervisor, with a stand-in command -------------------------------------------------------


def test_the_supervisor_clamps_a_policy_replaces_the_dead_and_stops_the_youngest(tmp_path: Path) -> None:
    readings = [QueueStats("q", visible=0, delayed=0, in_flight=0, total=0)]
    wanted = [9]
    pool = Pool(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        minimum=1,
        maximum=3,
        concurrency=1,
        read_stats=lambda: readings[-1],
        policy=lambda view: Scaling(wanted[-1], "the application says so"),
        status_path=str(tmp_path / "pool.json"),
    )
    try:
        pool.tick()
        first = read_status(tmp_path / "pool.json")
        assert first["target"] == 3 and first["running"] == 3  # 9 clamped to MAX
        assert first["decisions"][-1]["reason"] == "the application says so"
        victim = first["workers"][1]
        os.kill(victim, signal.SIGKILL)

        # It died young: the replacement waits a second (a worker that cannot start is no fork loop).
        def replaced() -> dict[str, Any] | None:
            pool.tick()
            found = read_status(tmp_path / "pool.json")
            return found if found["replaced"] == 1 and found["running"] == 3 else None

        after = wait_for(replaced, "a replacement")
        assert victim not in after["workers"]
        wanted.append(1)
        pool.tick()
        shrunk = read_status(tmp_path / "pool.json")
        assert shrunk["workers"] == after["workers"][:1]  # the oldest stays
        assert sorted(shrunk["stopping"]) == sorted(after["workers"][1:])
    finally:
        pool.stop()
        pool._shutdown()
    assert read_status(tmp_path / "pool.json")["running"] == 0


def test_a_failing_policy_keeps_the_pool_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    """A policy that raises or answers nonsense once it worked is logged; the workers it sizes keep
    running. At its first sample it is a configuration error: nothing was started."""
    first = Pool(
        ["true"],
        minimum=1,
        maximum=2,
        concurrency=1,
        read_stats=lambda: QueueStats("q", 0, 0, 0, 0),
        policy=lambda view: 2,  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(InvalidValueError, match="must return a Scaling, not 2"):
        first.tick()
    assert first._running() == 0
    answers: list[Any] = [Scaling(1, "fine"), 2, RuntimeError("policy bug")]

    def policy(view: PoolView) -> Scaling:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    pool = Pool(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        minimum=1,
        maximum=2,
        concurrency=1,
        read_stats=lambda: QueueStats("q", 0, 0, 0, 0),
        policy=policy,
    )
    try:
        for _ in answers[:]:
            pool.tick()
        assert pool.target == 1 and pool._running() == 1
    finally:
        pool.stop()
        pool._shutdown()
    assert "must return a Scaling, not 2" in caplog.text and "policy bug" in caplog.text


def read_status(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


# -- queue stats on every queue -------------------------------------------------------------------


def fill(queue: Queue) -> None:
    """Two visible, two delayed and one in flight: five in all."""
    for n in range(3):
        queue.send(f'{{"n": {n}}}')
    for n in range(2):
        queue.send(f'{{"d": {n}}}', delay=600)
    wait_for(lambda: queue.receive(max_messages=1, wait=1, visibility_timeout=600), "a receive")


def test_memory_and_sqlite_stats_are_exact(tmp_path: Path) -> None:
    import asyncio

    for queue in (MemoryQueue(), open_queue(f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs")):
        assert queue_stats(queue).total == 0 and queue_stats(queue).lag is None
        fill(queue)
        stats = queue_stats(queue)
        assert (stats.visible, stats.delayed, stats.in_flight, stats.total) == (2, 2, 1, 5)
        assert stats.exact and stats.lag is not None and stats.lag >= 0
        assert asyncio.run(aqueue_stats(queue)).total == 5
        queue.close()


def cli_stats(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "idemflow", "queue", "stats", "--queue", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_queue_stats_json_on_sqlite_counts_what_was_sent(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs"
    fill(open_queue(url))
    shown = cli_stats(url)
    assert shown["visible"] == 2 and shown["delayed"] == 2 and shown["in_flight"] == 1
    assert shown["total"] == 5 and shown["exact"] is True and shown["lag_source"] == "exact"


def test_queue_stats_json_on_sqs_counts_what_was_sent(moto: Moto, tmp_path: Path) -> None:
    url = moto.queue_url(f"s{uuid.uuid4().hex[:10]}", tmp_path, visibility_timeout=30)
    fill(open_queue(url))
    shown = wait_for(lambda: (lambda s: s if s["total"] == 5 else None)(cli_stats(url)), "SQS's counts")
    assert (shown["visible"], shown["delayed"], shown["in_flight"]) == (2, 2, 1)
    assert shown["lag_seconds"] is None and shown["lag_source"] == "cloudwatch" and shown["exact"] is False


def test_queue_stats_json_on_azure_counts_what_was_sent(azurite: Azurite, tmp_path: Path) -> None:
    url = azurite.queue_url(f"a{uuid.uuid4().hex[:10]}", tmp_path, visibility_timeout=30)
    fill(open_queue(url))
    shown = cli_stats(url)
    assert shown["total"] == 5 and shown["visible"] == 2  # the peek sees the two visible ones
    assert shown["delayed"] is None and shown["in_flight"] is None  # Azure counts them as one
    assert shown["lag_source"] == "peek" and shown["lag_seconds"] is not None


def test_queue_stats_text_names_the_unknowns(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'q.sqlite3'}"
    open_queue(url).close()  # an empty queue (the command creates none)
    done = subprocess.run(
        [sys.executable, "-m", "idemflow", "queue", "stats", "--queue", url], capture_output=True, text=True
    )
    assert done.returncode == 0 and "0 visible, 0 delayed, 0 in flight" in done.stdout
    assert "no lag (nothing visible)" in done.stdout


# -- the pool, end to end -------------------------------------------------------------------------

REQUESTS = 12


def run_the_load_step(store_url: str, queue_url: str, folder: Path) -> None:
    """1:3 processes of 2 threads: a burst of 12 held requests grows the pool to 3; a SIGKILLed
    worker is replaced; released, every request completes once and the pool shrinks to 1."""
    store = open_store(store_url, create=True)
    store.create_tables(*TEST_TABLES)
    queue = open_queue(queue_url)
    gate, status_path, log = folder / "gate", folder / "pool.json", folder / "pool.log"
    env = {key: value for key, value in os.environ.items() if key != "IDEMFLOW_SIGNING_KEY"}
    command = [sys.executable, "-m", "idemflow", "worker", "tests.support.pool_workflows:WORKFLOWS"]
    options = ["--store", store_url, "--queue", queue_url, "--concurrency", "2", "--relay-every", "1"]
    pool_options = ["--processes", "1:3", "--scale-every", "0.3", "--scale-cooldown", "2"]
    with open(log, "wb") as output:
        supervisor = subprocess.Popen(
            [*command, *options, *pool_options, "--pool-status", str(status_path)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: status_path.exists() and read_status(status_path)["running"] == 1, "one worker")
        space = f"p{uuid.uuid4().hex[:8]}-"
        for n in range(REQUESTS):
            job = {"gate": str(gate), "space": space, "n": n}
            submit(held(job), request_id=f"{space}{n}", store=store, queue=queue)
        grown = wait_for(
            lambda: (lambda s: s if s["running"] == 3 and s["target"] == 3 else None)(
                read_status(status_path)
            ),
            "the pool to grow to 3",
        )
        # One step, or several if a sample came while the burst was still being sent.
        steps = grown["decisions"]
        assert steps[0]["from"] == 1 and steps[-1]["to"] == 3
        assert all(step["to"] > step["from"] and step["reason"].startswith("backlog") for step in steps)
        victim = grown["workers"][-1]
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: (lambda s: s["replaced"] >= 1 and s["running"] == 3 and victim not in s["workers"])(
                read_status(status_path)
            ),
            "a replacement for the killed worker",
        )
        gate.touch()

        def all_completed() -> bool:
            done = [status(store, "held", f"{space}{n}").status for n in range(REQUESTS)]
            return done == [RunStatus.COMPLETED] * REQUESTS

        wait_for(all_completed, "every request to complete")
        counted = {
            key: value for (table, _, key), value in rows_of(store, space).items() if table == "tablea"
        }
        assert counted == {f"r{n}": 1 for n in range(REQUESTS)}
        shrunk = wait_for(
            lambda: (lambda s: s if s["target"] == 1 and s["running"] == 1 else None)(
                read_status(status_path)
            ),
            "the pool to shrink back to 1",
        )
        assert shrunk["decisions"][-1]["to"] == 1 and shrunk["decisions"][-1]["reason"].startswith("quiet")
    finally:
        supervisor.send_signal(signal.SIGTERM)
        code = supervisor.wait(timeout=TIMEOUT)
        queue.close()
        store.close()
    assert code == 0, log.read_text()
    final = read_status(status_path)
    assert final["running"] == 0 and final["stopping"] == []
    text = log.read_text()
    for expected in ("pool: grow 1 -> ", "died (exit -9)", "pool: shrink ", "-> 1: quiet"):
        assert expected in text, text


def pool_at(path: Path, size: int) -> dict[str, Any] | None:
    """The pool's status once it keeps and runs ``size`` workers (none stopping), else None."""
    found = read_status(path)
    return found if found["target"] == found["running"] == size and not found["stopping"] else None


def test_the_pool_follows_a_load_step_on_sqlite(tmp_path: Path) -> None:
    run_the_load_step(
        f"sqlite:{tmp_path / 'store.sqlite3'}",
        f"sqlite:{tmp_path / 'queue.sqlite3'}?visibility_timeout=2",
        tmp_path,
    )


@pytest.mark.slow
def test_the_pool_follows_a_load_step_on_sqs(moto: Moto, tmp_path: Path) -> None:
    name = f"p{uuid.uuid4().hex[:10]}"
    run_the_load_step(
        f"sqlite:{tmp_path / 'store.sqlite3'}", moto.queue_url(name, tmp_path, visibility_timeout=2), tmp_path
    )


@pytest.mark.slow
def test_the_pool_follows_a_load_step_on_azure(azurite: Azurite, tmp_path: Path) -> None:
    name = f"p{uuid.uuid4().hex[:10]}"
    run_the_load_step(
        f"sqlite:{tmp_path / 'store.sqlite3'}",
        azurite.queue_url(name, tmp_path, visibility_timeout=2),
        tmp_path,
    )


def test_asyncio_queues_report_the_same_stats(moto: Moto, azurite: Azurite, tmp_path: Path) -> None:
    """``aqueue_stats`` on the SDKs' asynchronous clients reads what the blocking queues read."""
    import asyncio

    from idemflow.worker import open_async_queue

    for server in (moto, azurite):
        url = server.queue_url(f"a{uuid.uuid4().hex[:10]}", tmp_path, visibility_timeout=30)
        fill(open_queue(url))

        async def read(url: str = url) -> QueueStats:
            queue = open_async_queue(url)
            try:
                return await aqueue_stats(queue)
            finally:
                await queue.close()

        stats = asyncio.run(read())
        blocking = queue_stats(open_queue(url))
        counted = ("visible", "delayed", "in_flight", "total", "lag_source", "exact")
        assert stats.total == 5
        assert [getattr(stats, f) for f in counted] == [getattr(blocking, f) for f in counted]


def test_a_pool_refuses_idle_timeout_and_a_nested_pool(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "idemflow", "worker", "tests.support.pool_workflows:WORKFLOWS"]
    urls = ["--store", f"sqlite:{tmp_path / 's.sqlite3'}", "--queue", f"sqlite:{tmp_path / 'q.sqlite3'}"]
    mixed = subprocess.run([*base, *urls, "--processes", "1:2", "--idle-timeout", "1"], capture_output=True)
    assert mixed.returncode == 2 and b"--idle-timeout" in mixed.stderr
    nested = subprocess.run(
        [*base, *urls, "--processes", "1:2"],
        capture_output=True,
        env={**os.environ, "IDEMFLOW_POOL_WORKER": "1"},
    )
    assert nested.returncode == 2 and b"started by a pool" in nested.stderr
    bad = subprocess.run([*base, *urls, "--processes", "3:1"], capture_output=True)
    assert bad.returncode == 2 and b"MIN:MAX" in bad.stderr
    short = subprocess.run([*base, *urls, "--proc", "1:2"], capture_output=True)
    assert short.returncode == 2 and b"write --processes in full" in short.stderr


def ended(pid: int) -> bool:
    """The process exited: gone, or a zombie nobody reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_workers_of_a_sigkilled_supervisor_stop(tmp_path: Path) -> None:
    status_path = tmp_path / "pool.json"
    command = [sys.executable, "-m", "idemflow", "worker", "tests.support.pool_workflows:WORKFLOWS"]
    urls = ["--store", f"sqlite:{tmp_path / 's.sqlite3'}", "--queue", f"sqlite:{tmp_path / 'q.sqlite3'}"]
    options = ["--processes", "2:2", "--scale-every", "0.2", "--pool-status", str(status_path)]
    supervisor = subprocess.Popen(
        [*command, *urls, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        workers = wait_for(lambda: status_path.exists() and pool_at(status_path, 2), "two workers")["workers"]
    finally:
        supervisor.kill()
        supervisor.wait()
    wait_for(lambda: all(ended(pid) for pid in workers), "the orphaned workers to stop")
