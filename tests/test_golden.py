"""Rows written by earlier releases are read by this one (as Temporal replays recorded histories).

``tests/golden/<release>.json`` holds every row a release wrote for four requests of one workflow
(finished, aborted, submitted with its queue message, and abandoned after its first commit) and
the message; ``make_golden.py`` made them. ``tests/golden/coordination/<release>.json`` holds
requests caught waiting on a timer, a child and a message (``make_coordination_golden.py``),
``retrying/`` requests a worker was retrying (``make_retrying_golden.py``), ``events/`` requests
that set events and wrote streams (``make_events_golden.py``), ``retention/``
requests submitted with a retention of their own (``make_retention_golden.py``), ``scheduled/``
delayed and prioritised requests waiting, with their messages' lanes and visible times
(``make_scheduled_golden.py``), ``tagged/`` requests started with tags in every state a record
keeps them (``make_tagged_golden.py``), ``together/`` ``all_of`` and ``any_of`` blocks caught half
done, decided and waiting (``make_together_golden.py``), ``places/`` requests naming where their
atomic steps keep their memos (``make_places_golden.py``), ``schedules/`` schedules' state rows
and a tick's request (``make_schedules_golden.py``), ``renewed/`` requests that continued as
new, finished and caught asleep in a later incarnation (``make_renewed_golden.py``); every
request of every release is listed without its code.
Loaded into each store, this version must answer the finished ones from their records, finish the
others exactly once, and read the old messages.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from idemflow import RetryPolicy, StreamTimeoutError, WorkflowAborted, run
from idemflow.admin import RunRecord, retry, runs, schedules, show
from idemflow.async_worklist.queues.lanes import LANES, lane_of
from idemflow.client import RunStatus, get_event, read_stream, rows, status
from idemflow.engine.memo_reader import WAIT_ENDED
from idemflow.keys import RUN, RUNS_TABLE, memo_key
from idemflow.records import FORMAT
from idemflow.running.runner import run_status
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Insert, RowRef
from idemflow.stores.long_waits import sweeps
from idemflow.worker import LanedQueue, MemoryQueue, Worker, fire_schedules
from tests.conformance.test_continuations import Clock, deliver_all
from tests.golden.make_golden import golden

pytestmark = pytest.mark.every_bed  # a contract of the store itself: on every bed, moto too

GOLDEN = sorted(Path(__file__).with_name("golden").glob("*.json"))


def load(store: Store, path: Path) -> list[str]:
    return list(load_rows(store, path)["messages"])


def load_rows(store: Store, path: Path) -> dict[str, Any]:
    """Commit the rows of ``path`` to ``store``; the recorded file, for its messages and clock."""
    recorded: dict[str, Any] = json.loads(path.read_text())
    for table, partition, key, value in recorded["rows"]:
        store.commit([Insert(RowRef(table, partition, key), value, encode(value))])
    return recorded


def balances(store: Store) -> dict[str, Any]:
    return {partition: value for (partition, _), value in rows(store, "tablea").items()}


@pytest.mark.exact_calls  # rows are loaded with plain commits
@pytest.mark.parametrize("path", GOLDEN, ids=lambda path: path.stem)
def test_rows_of_every_release_replay(store: Store, path: Path) -> None:
    messages = load(store, path)
    before = balances(store)
    assert before == {"ada": -5, "bob": -3, "cy": -2}
    assert run(golden({"id": "done", "who": "ada", "amount": 5}), request_id="done", store=store) == {
        "shipped": "done"
    }
    with pytest.raises(WorkflowAborted, match="cancelled"):
        run(
            golden({"id": "aborted", "who": "ada", "amount": 7, "abort": True}),
            request_id="aborted",
            store=store,
        )
    finished = run(golden({"id": "halfway", "who": "cy", "amount": 2}), request_id="halfway", store=store)
    assert finished == {"shipped": "halfway"}
    queue = MemoryQueue()
    for body in messages:
        queue.send(body)
    stats = Worker([golden], store=store, queue=queue, wait=0.01, relay_every=None).run(idle_timeout=0.2)
    assert (stats.completed, stats.dead_lettered) == (1, 0)
    assert status(store, "golden", "queued").result == {"shipped": "queued"}
    assert balances(store) == before  # every debit happened once, before or now
    shipped = {key for (_, key) in rows(store, "tableb")}
    assert shipped == {"done", "halfway", "queued"}


COORDINATION = sorted(Path(__file__).with_name("golden").joinpath("coordination").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", COORDINATION, ids=lambda path: path.stem)
def test_requests_caught_waiting_by_every_release_finish(store: Store, path: Path) -> None:
    """A sleeper, a parent waiting for its child and a receiver with a message waiting, as an
    earlier release left them (``make_coordination_golden.py``), finish once on this version."""
    from tests.golden import make_coordination_golden as g

    messages = load(store, path)
    clock = Clock()
    clock.now = g.NOW + 4000  # past the sleep's due time, before the receive's deadline
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    deliver_all(worker, queue, clock, rounds=100, step=900)
    assert worker.stats.dead_lettered == 0
    results = {
        rid: status(store, flow, rid).result
        for flow, rid in [
            ("g-sleeper", "sleeper-sam"),
            ("g-parent", "parent-pia"),
            ("g-kid", "kid-pia"),
            ("g-inbox", "inbox-ivy"),
            ("g-writer", "writer-ivy"),
        ]
    }
    assert results == {
        "sleeper-sam": "rested",
        "parent-pia": "kid of pia",
        "kid-pia": "kid of pia",
        "inbox-ivy": "hello ivy",
        "writer-ivy": "sent",
    }
    counted = {(partition, key): value for (partition, key), value in rows(store, "tablea").items()}
    assert counted == {
        ("sam", "before"): 1,
        ("sam", "after"): 1,
        ("pia", "kid"): 1,
        ("pia", "parent"): 1,
        ("ivy", "read"): 1,
    }


RETRYING = sorted(Path(__file__).with_name("golden").joinpath("retrying").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("fixed", [True, False], ids=["fixed", "still-failing"])
@pytest.mark.parametrize("path", RETRYING, ids=lambda path: path.stem)
def test_requests_caught_retrying_by_every_release_keep_their_count(
    store: Store, path: Path, fixed: bool
) -> None:
    """A request a worker was retrying, and an aborted one whose charge was refunded, as an
    earlier release left them (``make_retrying_golden.py``): no outside call is made again, and
    the stored attempt count is kept (one attempt of three was left)."""
    from tests.golden import make_retrying_golden as g

    messages = load(store, path)
    g.CALLS.clear()
    g.FIXED[0] = fixed
    clock = Clock()
    clock.now = json.loads(path.read_text())["now"]
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    deliver_all(Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None), queue, clock)
    done = status(store, "g-retry", "retry-rae")
    if fixed:
        assert done.result == {"charge": "charge rae", "key": done.result["key"]}
        assert rows(store, "tablea") == {("rae", "shipped"): 1}
    else:
        assert done.failure is not None and (done.failure.step, done.failure.attempts) == (2, 3)
    late = status(store, "g-retry", "late-dee")
    assert late.failure is not None and "deadline exceeded" in late.failure.reason
    cancelled = status(store, "g-retry", "cancel-cal")  # its reason in the note 0.4.0 wrote
    assert (cancelled.status, cancelled.reason) == (RunStatus.CANCELLED, "checking")
    with pytest.raises(WorkflowAborted, match="sold out"):
        run(g.undoing("uma"), request_id="undo-uma", store=store)
    assert g.CALLS == {}  # the charges and the refund are memoized: none is made again
    retry(store, queue, "g-retry", "cancel-cal")  # resumed: it runs now, on this version
    deliver_all(Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None), queue, clock)
    resumed = status(store, "g-retry", "cancel-cal").status
    assert resumed is (RunStatus.COMPLETED if fixed else RunStatus.FAILED)


RETENTION = sorted(Path(__file__).with_name("golden").joinpath("retention").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", RETENTION, ids=lambda path: path.stem)
def test_requests_submitted_with_a_retention_keep_it_on_every_row_written_later(
    store: Store, path: Path
) -> None:
    """A queued request and a cancelled one, submitted with a short retention by an earlier
    release (``make_retention_golden.py``), finish on this version under a worker (and an
    operator's resume) whose own retention is an hour: every row written for them expires by
    theirs. The loaded rows carry no expiry, so those with one are this version's."""
    from tests.golden import make_retention_golden as g
    from tests.support.expiries import expiries

    messages = load(store, path)
    began = time.time()
    clock = Clock()
    clock.now = g.NOW + 60
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(
        g.WORKFLOWS,
        store=store,
        queue=queue,
        clock=clock,
        relay_every=None,
        policy=RetryPolicy(retention=3600.0),
    )
    deliver_all(worker, queue, clock)
    retry(store, queue, "g-keep", "cancel-ken")
    deliver_all(worker, queue, clock)
    assert status(store, "g-keep", "keep-kim").result == "kept kim"
    assert status(store, "g-keep", "cancel-ken").result == "kept ken"
    written = {where: at for where, at in expiries(store).items() if at is not None}
    assert len(written) >= 4, written  # each request's second memo and completion record
    since = max(began, g.NOW + 60)  # rows expire by the later of wall time and the worker's clock
    late = {
        where: at - since
        for where, at in written.items()
        if not since + g.RETENTION - 1 <= at <= max(time.time(), clock.now) + g.RETENTION + 1
    }
    assert not late, late


SCHEDULED = sorted(Path(__file__).with_name("golden").joinpath("scheduled").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", SCHEDULED, ids=lambda path: path.stem)
def test_delayed_and_prioritised_requests_of_every_release_start_on_time_in_their_lane(
    store: Store, path: Path
) -> None:
    """Delayed and prioritised requests waiting as an earlier release left them
    (``make_scheduled_golden.py``), their messages back in their lanes at their visible times:
    none starts before its time (their early pointers hop, in their lanes), each then runs once,
    the high lane is taken first whenever several are visible, the relay sends the lost one to
    the lane its record names, and the sleeper's timer, the child and its wake-up keep their lane."""
    from tests.golden import make_scheduled_golden as g

    recorded = load_rows(store, path)
    clock = Clock()
    clock.now = g.NOW + 60  # the undelayed are visible, the outbox entry is due, nothing else
    queue = LanedQueue({lane: MemoryQueue(clock=clock) for lane in LANES})
    for message in recorded["messages"]:
        queue.lane(message["lane"]).send(message["body"], delay=max(0.0, message["visible_at"] - clock.now))
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    assert worker.relay() == 1
    taken = _taken_in_order(worker, queue)
    assert taken == [
        ("high-hal", "high"),
        ("lost-lia", "high"),
        ("low-lou", "low"),
        ("nap-nia", "low"),
        ("parent-pam", "low"),
        ("kid-pam", "low"),  # the child, started in its parent's lane
        ("parent-pam", "low"),  # woken by its child, in its lane
    ]
    _assert_waiting(store, g.DUE)
    clock.now = g.NOW + 1000  # the delayed ones' first pointers and the sleeper's timer arrive early
    hopped = _taken_in_order(worker, queue)
    if not sweeps(store):  # rows expire by date: the parent's wait on its child set a keep-alive
        hopped.remove(("parent-pam", "low"))  # timer, whose hop comes now to a finished request
    assert hopped == [("soon-sue", "high"), ("later-lea", "normal"), ("at-ned", "normal"), ("nap-nia", "low")]
    _assert_waiting(store, g.DUE)
    assert {lane: queue.lane(lane).approximate_size() for lane in LANES} == {"high": 1, "normal": 2, "low": 1}
    clock.now = g.NOW + 4000  # every one due, all visible together
    last = _taken_in_order(worker, queue)
    assert last == [
        ("soon-sue", "high"),
        ("at-ned", "normal"),
        ("later-lea", "normal"),
        ("nap-nia", "low"),
    ]
    taken += hopped + last
    assert queue.approximate_size() == 0 and worker.stats.dead_lettered == 0
    results = {rid: status(store, flow, rid).result for flow, rid in _REQUESTS}
    assert results == {
        "high-hal": 1,
        "lost-lia": 2,
        "low-lou": 3,
        "kid-pam": 5,
        "parent-pam": 5,
        "soon-sue": 6,
        "at-ned": 7,
        "later-lea": 8,
        "nap-nia": [4, 9],
    }
    ran = {partition: value for (partition, key), value in rows(store, "tablea").items() if key == "ran"}
    assert ran == {who: 1 for who in ["hal", "lia", "lou", "pam", "sue", "ned", "lea", "nia"]}  # each once
    lanes = {rid: {lane for taken_id, lane in taken if taken_id == rid} for _, rid in _REQUESTS}
    assert lanes == {
        "high-hal": {"high"},
        "lost-lia": {"high"},
        "low-lou": {"low"},
        "soon-sue": {"high"},
        "at-ned": {"normal"},
        "later-lea": {"normal"},
        "nap-nia": {"low"},
        "parent-pam": {"low"},
        "kid-pam": {"low"},
    }


_REQUESTS = [
    ("g-sched", "high-hal"),
    ("g-sched", "lost-lia"),
    ("g-sched", "low-lou"),
    ("g-sched", "soon-sue"),
    ("g-sched", "at-ned"),
    ("g-sched", "later-lea"),
    ("g-nap", "nap-nia"),
    ("g-parent", "parent-pam"),
    ("g-sched", "kid-pam"),
]


def _taken_in_order(worker: Worker, queue: LanedQueue) -> list[tuple[str, str]]:
    """Hand ``worker`` every visible message, one at a time as one worker thread takes them:
    each as (request id, the lane it came from)."""
    taken = []
    while received := queue.receive():
        [message] = received
        taken.append((json.loads(message.body)["request_id"], lane_of(message) or "normal"))
        worker.handle(message)
    return taken


def _assert_waiting(store: Store, due: dict[str, float]) -> None:
    """The delayed requests have committed no step and say until when they wait."""
    for rid, at in due.items():
        waiting = status(store, "g-sched", rid)
        until = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        assert (waiting.status, waiting.waiting) == (RunStatus.RUNNING, f"waiting until {until}")
    assert not {partition for (partition, _) in rows(store, "tablea")} & {"sue", "ned", "lea"}


TAGGED = sorted(Path(__file__).with_name("golden").joinpath("tagged").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", TAGGED, ids=lambda path: path.stem)
def test_tagged_requests_of_every_release_are_listed_by_tag_and_keep_their_tags_to_the_end(
    store: Store, path: Path
) -> None:
    """Tagged requests as an earlier release left them (``make_tagged_golden.py``: finished,
    queued, asleep on a timer, cancelled) are listed by their tags, finish once on this version
    (the cancelled one once resumed), and every record still carries its tags."""
    from tests.golden import make_tagged_golden as g

    messages = load(store, path)
    ids = set(g.TAGS)

    def tagged(**tags: str) -> list[str]:
        return sorted(found.request_id for found in runs(store, tags=tags).runs if found.request_id in ids)

    assert tagged(customer="c-1") == ["cancel-cole", "done-dan", "queue-quinn"]
    assert tagged(region="eu") == ["done-dan", "nap-nell"]
    clock = Clock()
    clock.now = g.NOW + g.NAP + 1  # the nap is over
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    deliver_all(worker, queue, clock)
    retry(store, queue, "g-tag", "cancel-cole")
    deliver_all(worker, queue, clock)
    assert worker.stats.dead_lettered == 0
    for rid, tags in g.TAGS.items():
        record = run_status(store, "g-tag", rid)
        assert record is not None and record.status is RunStatus.COMPLETED, rid
        assert (record.result, record.tags) == ("shipped " + rid.split("-")[1], tags)
    assert tagged(customer="c-1", region="eu") == ["done-dan"]
    assert {(partition, key): value for (partition, key), value in rows(store, "tablea").items()} == {
        (who, what): 1 for who in ("dan", "quinn", "nell", "cole") for what in ("paid", "shipped")
    }


TOGETHER = sorted(Path(__file__).with_name("golden").joinpath("together").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", TOGETHER, ids=lambda path: path.stem)
def test_all_of_and_any_of_requests_of_every_release_finish_calling_only_what_no_memo_answers(
    store: Store, path: Path
) -> None:
    """Blocks of branches as an earlier release left them (``make_together_golden.py``): an
    ``all_of`` dead after two of its three memos makes the third call only; a finished
    ``any_of`` and one dead after its decision answer from their memos, with the winner they
    decided; the ones waiting for a message or their time end with the message in their inbox,
    or the timeout."""
    from tests.golden import make_together_golden as g

    messages = load(store, path)
    g.CALLS.clear()
    clock = Clock()
    clock.now = g.NOW + g.NAP + 1  # the waits are over
    assert run(g.quotes("ann"), request_id="all-half", store=store, clock=clock) == 1
    assert run(g.first("bo"), request_id="any-done", store=store, clock=clock) == [0, "x"]
    assert run(g.first("cy"), request_id="any-decided", store=store, clock=clock) == [0, "x"]
    assert g.CALLS == {"c": 1}
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    deliver_all(worker, queue, clock)
    assert worker.stats.dead_lettered == 0
    assert status(store, "g-wait", "any-note").result == [0, "hello"]
    assert status(store, "g-wait", "any-nap").result == [1, None]


PLACES = sorted(Path(__file__).with_name("golden").joinpath("places").glob("*.json"))


def _listed(store: Store, workflow: str, request_id: str) -> tuple[list[tuple[Any, ...]], tuple[str, ...]]:
    view = show(store, [], workflow, request_id)  # without the code
    return [(s.number, s.kind, s.name, s.table, s.partition) for s in view.steps], view.notes


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", PLACES, ids=lambda path: path.stem)
def test_requests_naming_their_places_are_listed_without_code_and_finish_once(
    store: Store, path: Path
) -> None:
    """Requests whose rows name their atomic steps' places (``make_places_golden.py``: finished,
    queued at a checkpoint, asleep on a worker's timer) list every step without the workflow's
    code, finish once on this version, and list every step again."""
    from tests.golden import make_places_golden as g

    messages = load(store, path)

    def expected(request_id: str, upto: int) -> list[tuple[Any, ...]]:
        who = request_id.split("-")[1]
        return [
            (n, kind, name, table, request_id if suffix is None else who + suffix)
            for n, kind, name, table, suffix in g.STEPS[:upto]
        ]

    done = (*expected("done-dora", 5), (6, "atomic", "done", "tablea", "dora"))
    assert _listed(store, "g-place", "done-dora") == (list(done), ())
    assert _listed(store, "g-place", "queue-quill") == (expected("queue-quill", 3), ())
    napping, notes = _listed(store, "g-place", "nap-nora")
    assert napping[:5] == expected("nap-nora", 5) and napping[5][:2] == (6, "sleep") and notes == ()
    clock = Clock()
    clock.now = g.NOW + g.NAP + 1  # the nap is over
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    deliver_all(worker, queue, clock)
    assert worker.stats.dead_lettered == 0
    for request_id in ("done-dora", "queue-quill", "nap-nora"):
        assert status(store, "g-place", request_id).result == "done " + request_id.split("-")[1]
    assert _listed(store, "g-place", "done-dora") == (list(done), ())
    quill = (*expected("queue-quill", 5), (6, "atomic", "done", "tablea", "quill"))
    assert _listed(store, "g-place", "queue-quill") == (list(quill), ())
    nora = [*napping, (7, "atomic", "done", "tablea", "nora")]
    assert _listed(store, "g-place", "nap-nora") == (nora, ())
    counted = {(partition, key): value for (partition, key), value in rows(store, "tablea").items()}
    assert counted == {(who, what): 1 for who in ("dora", "quill", "nora") for what in ("paid", "done")}


RENEWED = sorted(Path(__file__).with_name("golden").joinpath("renewed").glob("*.json"))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", RENEWED, ids=lambda path: path.stem)
def test_requests_that_continued_as_new_answer_and_finish_each_period_once(store: Store, path: Path) -> None:
    """A request run to its third incarnation, and one submitted and caught asleep in its second
    (``make_renewed_golden.py``): the first answers from its record (a duplicate of its first input
    pays nothing), the second's timer finishes it on this version, each period paid once."""
    from tests.golden import make_renewed_golden as g

    messages = load(store, path)
    done = status(store, "g-renew", "done-rita")
    assert (done.status, done.result, done.incarnation) == (RunStatus.COMPLETED, "renewed rita 3", 3)
    assert run(g.renewing("rita", 1, 3), request_id="done-rita", store=store) == "renewed rita 3"
    assert status(store, "g-renew", "nap-nina").incarnation == 2
    clock = Clock()
    clock.now = g.NOW + 3 * g.NAP
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    deliver_all(Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None), queue, clock)
    finished = status(store, "g-renew", "nap-nina")
    assert (finished.result, finished.incarnation) == ("renewed nina 3", 3)
    assert {partition: value for (partition, _), value in rows(store, "tablea").items()} == {
        "rita": 3,
        "nina": 3,
    }


EVENTS = sorted(Path(__file__).with_name("golden").joinpath("events").glob("*.json"))
SCHEDULES = sorted(Path(__file__).with_name("golden").joinpath("schedules").glob("*.json"))
EVERY_RELEASE = [
    *GOLDEN,
    *COORDINATION,
    *RETRYING,
    *RETENTION,
    *SCHEDULED,
    *TAGGED,
    *EVENTS,
    *TOGETHER,
    *PLACES,
    *SCHEDULES,
    *RENEWED,
]


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", EVERY_RELEASE, ids=lambda path: f"{path.parent.name}-{path.stem}")
def test_every_request_of_every_release_is_listed_without_its_code(store: Store, path: Path) -> None:
    """``runs show`` without ``--workflows`` on rows any release wrote: no error, every memo kept
    beside a record is listed, and an atomic step's memo is listed where its record (or the
    places row beside it) names its place, else a note says which steps are not listed."""
    recorded = load_rows(store, path)
    rows_of = recorded["rows"]
    requests = [
        (key[len(RUN) :], partition)
        for table, partition, key, _ in rows_of
        if table == RUNS_TABLE and key.startswith(RUN)
    ]
    assert requests
    for workflow, request_id in requests:
        prefix = memo_key(workflow, request_id, "")
        memos = {
            (table, int(key[len(prefix) + 1 :]))
            for table, _, key, value in rows_of
            if key.startswith(prefix + "s")
            and key[len(prefix) + 1 :].isdigit()
            and value.get("id") != WAIT_ENDED
        }
        record = RunRecord.from_json(
            next(v for t, p, k, v in rows_of if (t, p, k) == (RUNS_TABLE, request_id, RUN + workflow))
        )
        named = record.places is not None or any(k == prefix + "j" for _, _, k, _ in rows_of)
        view = show(store, [], workflow, request_id)
        listed = {step.number for step in view.steps if step.outcome != "compensated"}
        assert {n for table, n in memos if table == RUNS_TABLE} <= listed, (workflow, request_id)
        atomic = {n for table, n in memos if table != RUNS_TABLE}
        if named:
            assert atomic <= listed, (workflow, request_id)
        elif atomic - listed:
            assert any("not listed" in note for note in view.notes), (workflow, request_id, view.notes)


def test_every_run_record_of_every_release_writes_back_byte_for_byte() -> None:
    """What a release wrote reads back as this version writes it, to the byte: a record without
    tags (or any field added since) gains nothing, and one with tags keeps them as stored."""
    paths = EVERY_RELEASE
    records = [
        value
        for path in paths
        for table, _, key, value in json.loads(path.read_text())["rows"]
        if table == RUNS_TABLE and key.startswith(RUN)
    ]
    assert len(records) > 30 and any("tg" in value for value in records)
    assert any("pl" in value for value in records)
    for value in records:
        assert encode(RunRecord.from_json(value).to_json()) == encode(value)


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", EVENTS, ids=lambda path: path.stem)
def test_events_and_streams_of_every_release_are_read_and_go_on_at_their_next_offset(
    store: Store, path: Path
) -> None:
    """A finished request's event and closed stream, and a submitted one caught at its checkpoint
    with its event set and one value written, as an earlier release left them
    (``make_events_golden.py``): readers read both, and this version's worker writes the second
    request's next value at offset 1, once, sets its event and closes its stream."""
    from tests.golden import make_events_golden as g

    messages = load(store, path)
    assert list(read_stream(store, "g-publisher", "done-dot", "log")) == ["accepted dot", "shipped dot"]
    assert get_event(store, "g-publisher", "done-dot", "stage", timeout=0) == "shipped"
    assert get_event(store, "g-publisher", "open-oli", "stage", timeout=0) == "accepted"
    with pytest.raises(StreamTimeoutError):
        list(read_stream(store, "g-publisher", "open-oli", "log", offset=1, timeout=0.1))
    clock = Clock()
    clock.now = g.NOW + 60
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    deliver_all(Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None), queue, clock)
    assert status(store, "g-publisher", "open-oli").result == "published oli"
    assert list(read_stream(store, "g-publisher", "open-oli", "log")) == ["accepted oli", "shipped oli"]
    assert get_event(store, "g-publisher", "open-oli", "stage", timeout=0) == "shipped"
    assert run(g.publisher("dot"), request_id="done-dot", store=store) == "published dot"
    written = [key for _, key, _ in store.scan(RUNS_TABLE, "open-oli") if key.startswith("tg-publisher")]
    assert len(written) == 3  # two values and the end: nothing written twice


RELEASE_FORMAT = {"0.1.0": 1, "0.2.0": 2, "0.3.0": 3, "0.4.0": 4, "1.0.0": 5, "1.1.0": 6, "1.2.0": 7}
"""The format revision (:data:`idemflow.records.FORMAT`) each release's golden rows were written in."""


def test_every_format_revision_has_golden_rows() -> None:
    """Raising ``FORMAT`` needs golden rows of the new revision; new golden rows need their revision."""
    releases = {path.stem for path in EVERY_RELEASE}
    assert {RELEASE_FORMAT[release] for release in releases} == set(range(1, FORMAT + 1))


@pytest.mark.exact_calls
@pytest.mark.parametrize("path", SCHEDULES, ids=lambda path: path.stem)
def test_schedules_go_on_from_their_rows_and_fire_no_tick_twice(store: Store, path: Path) -> None:
    """Schedules' state rows (``make_schedules_golden.py``: one tick fired and its request queued,
    one paused, one seen and never fired): the request finishes once on this version, and a pass
    two days later fires each schedule from where its row says: the nightly one the two nights
    since its last tick (catch-up ``all``), the fresh one its latest night, the paused one nothing."""
    from tests.golden import make_schedules_golden as g

    messages = load(store, path)
    clock = Clock()
    clock.now = g.NOW
    queue = MemoryQueue(clock=clock)
    for body in messages:
        queue.send(body)
    worker = Worker(g.WORKFLOWS, store=store, queue=queue, clock=clock, relay_every=None)
    deliver_all(worker, queue, clock)
    assert status(store, "g-scheduled", "g-nightly@2027-01-15T02:00:00Z").result == "nightly 2027-01-15"
    [nightly, paused, fresh] = schedules(store, g.SCHEDULES, clock=clock)
    assert (nightly.last_tick, paused.paused, fresh.last_tick) == (g.FIRED, True, None)
    later = g.NOW + 2 * g.DAY
    report = fire_schedules(g.SCHEDULES, store=store, queue=queue, clock=lambda: later)
    assert [fired.ticks for fired in report.fired] == [
        (g.FIRED + g.DAY, g.FIRED + 2 * g.DAY),
        (),
        (g.FIRED + 2 * g.DAY,),
    ]
    clock.now = later
    deliver_all(worker, queue, clock)
    counted = {(partition, key): value for (partition, key), value in rows(store, "tablea").items()}
    assert counted == {
        ("nightly", "2027-01-15"): 1,
        ("nightly", "2027-01-16"): 1,
        ("nightly", "2027-01-17"): 1,
        ("fresh", "2027-01-17"): 1,
    }
