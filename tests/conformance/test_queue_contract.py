"""The work-queue contract, run unchanged against every backend.

A new queue is done when this file passes on it. Local queues run on a fake
clock (time moves by assignment, never by sleeping); the cloud queues run on
moto server and Azurite with one-second visibility timeouts, and wait only in
bounded polls for an eventual redelivery, never asserting on timing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemflow import admin
from idemflow.async_worklist.queues import Message, ThreadedQueue, async_queue_twin
from idemflow.async_worklist.queues.registry import QUEUES
from idemflow.errors import InvalidInputError, LimitExceededError
from idemflow.stores.registry import Feature
from idemflow.worker import DeadLetter, Queue
from tests.support.apis import LOOP
from tests.support.selection import kinds

CLOUD_VT = 1
"""Visibility timeout on the cloud queues: short, so redelivery tests wait about a second."""
LOCAL_VT = 30.0

HOSTILE_BODIES = [
    json.dumps(
        {"ünïcødé": "日本語 ✓ 😀 𝄞", "rtl": "שלום مرحبا", "zw": "a\u200bb\u200dc"}, ensure_ascii=False
    ),
    json.dumps({"xml": "<a>&amp;]]></a>", "quote": "\"'\\", "nul": "\x00", "ctl": "\x01\x1f\x7f"}),
    json.dumps(["\ufffe\uffff", "\u2028\u2029", "\ud7ff\ue000\ufffd", "~0041~"], ensure_ascii=False),
    '{"crlf":\r\n"x",\t"y":\r"z"}\n',
    "  leading and trailing whitespace  ",
    "",
    "~",
    "~007E not an escape",
    "raw \x00 \x0b \x1b control characters",
    "e\u0301 combining, \U0010ffff last code point",
]


class FakeTime:
    """A clock the test moves by hand; ``sleep`` moves it instead of waiting."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self._lock = threading.Lock()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds
        time.sleep(0)  # let other threads run, as a real sleep would


@dataclass
class QueueFactory:
    """Fresh queues of one kind, second handles on them, and a way to let time pass."""

    kind: str
    build: Callable[[str, float], Queue]
    clock: FakeTime | None
    names: Iterator[str]
    shared: bool = True
    """Whether a second handle reaches the same queue (not the in-process one)."""
    opened: list[Queue] = field(default_factory=list)
    made: dict[int, tuple[str, float]] = field(default_factory=dict)
    """The name and visibility timeout each queue was opened with (the protocol has no name)."""

    @property
    def cloud(self) -> bool:
        return self.clock is None

    @property
    def vt(self) -> float:
        """The visibility timeout tests use to watch a message come back."""
        return CLOUD_VT if self.cloud else LOCAL_VT

    def __call__(self, visibility_timeout: float | None = None) -> Queue:
        return self._open(next(self.names), visibility_timeout or self.vt)

    def other(self, queue: Queue) -> Queue:
        """A second receiver on the same queue (the same object for the in-process queue)."""
        if not self.shared:
            return queue
        return self._open(*self.made[id(queue)])

    def _open(self, name: str, visibility_timeout: float) -> Queue:
        queue = self.build(name, visibility_timeout)
        self.opened.append(queue)
        self.made[id(queue)] = (name, visibility_timeout)
        return queue

    @property
    def quiet_wait(self) -> float:
        """How long to poll when checking that nothing comes back: past the expiry on the cloud."""
        return CLOUD_VT + 0.4 if self.cloud else 0.0

    def let_pass(self, seconds: float) -> None:
        """Move the fake clock; on the cloud queues real time passes in the polls that follow."""
        if self.clock is not None:
            self.clock.now += seconds

    def receive_within(
        self, queue: Queue, *, count: int = 1, within: float = 15.0, **kw: float
    ) -> list[Message]:
        """Poll until ``count`` messages arrived (or ``within`` real seconds passed)."""
        got: list[Message] = []
        deadline = time.monotonic() + within
        while len(got) < count and time.monotonic() < deadline:
            self.let_pass(0.5)  # local queues: half a fake second per poll, no real waiting
            wait = 0.5 if self.cloud else 0.0
            got += queue.receive(max_messages=count - len(got), wait=wait, **kw)
        return got


@pytest.fixture(params=kinds(*QUEUES.kinds()))
def queue_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueFactory]:
    kind = str(request.param)
    _, bed = QUEUES.bed(kind)
    server = request.getfixturevalue("backend_servers").get(bed.server)
    names = (f"q{uuid.uuid4().hex[:12]}" for _ in iter(int, 1))
    clock = FakeTime() if Feature.FAKE_CLOCK in bed.features else None

    def build(name: str, visibility_timeout: float) -> Queue:
        return server.queue(name, tmp_path, visibility_timeout=visibility_timeout, clock=clock)  # type: ignore[no-any-return]

    factory = QueueFactory(kind, build, clock, names, shared=Feature.SHARED in bed.features)
    yield factory
    for queue in factory.opened:
        queue.close()


def drain(factory: QueueFactory, queue: Queue, count: int) -> list[Message]:
    got = factory.receive_within(queue, count=count)
    assert len(got) == count
    return got


def test_fixed_hostile_bodies_round_trip_exactly(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    for body in HOSTILE_BODIES:
        queue.send(body)
    got = drain(queue_factory, queue, len(HOSTILE_BODIES))
    assert sorted(m.body for m in got) == sorted(HOSTILE_BODIES)
    for message in got:
        queue.ack(message)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_texts = st.builds(lambda v, a: json.dumps(v, ensure_ascii=a), json_values, st.booleans())


def test_arbitrary_unicode_json_round_trips_exactly(queue_factory: QueueFactory) -> None:
    if queue_factory.cloud:  # a property test against a server would be slow: the hostile set above
        test_fixed_hostile_bodies_round_trip_exactly(queue_factory)
        return
    queue = queue_factory()

    @settings(max_examples=60)
    @given(body=json_texts | st.text())
    def round_trip(body: str) -> None:
        queue.send(body)
        [message] = queue.receive()
        assert message.body == body and message.deliveries == 1
        queue.ack(message)

    round_trip()


def test_received_message_is_hidden_then_redelivered_with_one_more_delivery(
    queue_factory: QueueFactory,
) -> None:
    queue = queue_factory()
    other = queue_factory.other(queue)
    queue.send('{"job": 1}')
    before = time.monotonic()  # the message's hiding starts after this
    [first] = drain(queue_factory, queue, 1)
    assert first.deliveries == 1
    early = other.receive()  # hidden from everyone while its holder works: seen again only once
    assert early == [] or time.monotonic() - before >= queue_factory.vt  # a loaded machine paused past it
    if early:
        [again] = early
    else:
        queue_factory.let_pass(LOCAL_VT + 1)
        [again] = drain(queue_factory, other, 1)
    assert (again.id, again.body, again.deliveries) == (first.id, first.body, 2)
    other.ack(again)


def test_ack_deletes_for_good(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    queue.send("done")
    [message] = drain(queue_factory, queue, 1)
    queue.ack(message)
    queue_factory.let_pass(LOCAL_VT + 1)
    assert queue.receive(wait=queue_factory.quiet_wait) == []
    assert queue.approximate_size() == 0


def test_acking_twice_is_harmless(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    queue.send("twice")
    [message] = drain(queue_factory, queue, 1)
    queue.ack(message)
    queue.ack(message)
    assert queue.approximate_size() == 0


def test_nack_makes_it_visible_again(queue_factory: QueueFactory) -> None:
    queue = queue_factory(visibility_timeout=LOCAL_VT)
    queue.send("retry me")
    [message] = drain(queue_factory, queue, 1)
    queue.nack(message)
    [again] = drain(queue_factory, queue_factory.other(queue), 1)
    assert (again.id, again.body, again.deliveries) == (message.id, "retry me", 2)


def test_nack_and_send_delays_hide_the_message_for_a_while(queue_factory: QueueFactory) -> None:
    delay = float(CLOUD_VT) if queue_factory.cloud else 10.0
    queue = queue_factory(visibility_timeout=LOCAL_VT)
    queue.send("later", delay=delay)
    assert queue.receive() == []
    [message] = drain(queue_factory, queue, 1)
    queue.nack(message, delay=delay)
    assert queue.receive() == []
    [again] = drain(queue_factory, queue, 1)
    assert (again.body, again.deliveries) == ("later", 2)


def test_extend_keeps_it_hidden_past_the_original_timeout(queue_factory: QueueFactory) -> None:
    queue = queue_factory(visibility_timeout=queue_factory.vt)
    queue.send("long job")
    [message] = drain(queue_factory, queue, 1)
    extended = queue.extend(message, 60)
    assert (extended.id, extended.body, extended.deliveries) == (message.id, message.body, 1)
    queue_factory.let_pass(queue_factory.vt + 5)
    assert queue_factory.other(queue).receive(wait=queue_factory.quiet_wait) == []  # past the original expiry
    queue.ack(extended)
    assert queue.approximate_size() == 0


def test_dead_letter_moves_it_with_its_reason(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    bodies = ['{"poison": true}', "ctl \x00 ~ \ufffe"]
    for body in bodies:
        queue.send(body)
    for message in drain(queue_factory, queue, 2):
        queue.dead_letter(message, f"failed {message.deliveries} time(s):\nValueError")
    assert sorted(queue.dead_letters()) == sorted((b, "failed 1 time(s): ValueError") for b in bodies)
    queue_factory.let_pass(LOCAL_VT + 1)
    assert queue.receive(wait=queue_factory.quiet_wait) == []
    assert queue.approximate_size() == 0
    assert len(queue.dead_letters()) == 2  # listing leaves them in place


def test_the_largest_body_fits_and_can_still_be_dead_lettered(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    # Multi-byte characters count twice against the limit; they stay in the first 16 KiB, as
    # Azurite corrupts one that a network chunk boundary splits (docs/local-development.md).
    body = json.dumps("é" * 8000 + "a" * (queue.max_body_bytes - 16003), ensure_ascii=False)
    body += " " * (queue.max_body_bytes - len(body.encode()))
    assert len(body.encode()) == queue.max_body_bytes
    queue.send(body)
    [message] = drain(queue_factory, queue, 1)
    assert message.body == body
    queue.dead_letter(message, "too big to handle " * 100)
    [(dead, reason)] = queue.dead_letters()
    assert dead == body and reason.startswith("too big to handle")


POISON = ['{"poison": 1}', "ctl \x00 ~ \ufffe"]


def dead_letter_poison(factory: QueueFactory, queue: Queue) -> list[DeadLetter]:
    """Dead-letter the two ``POISON`` bodies after their second delivery; their dead letters by body."""
    for body in POISON:
        queue.send(body)
    for message in drain(factory, queue, 2):
        queue.nack(message)
    for message in drain(factory, queue, 2):
        assert message.deliveries == 2
        queue.dead_letter(message, f"gave up on {message.body[:4]!r}:\nafter {message.deliveries}")
    return sorted(queue.list_dead_letters(), key=lambda dead: POISON.index(dead.body))


def test_dead_letters_are_listed_with_ids_bodies_reasons_and_times(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    assert queue.list_dead_letters() == [] and queue.dead_letters() == []
    dead = dead_letter_poison(queue_factory, queue)
    assert [(d.body, d.reason) for d in dead] == [(b, f"gave up on {b[:4]!r}: after 2") for b in POISON]
    assert len({d.id for d in dead}) == 2 and all(isinstance(d.id, str) and d.id for d in dead)
    for d in dead:  # epoch seconds (the fake clocks start in 2023), not milliseconds or a monotonic clock
        assert d.dead_at is not None and 1.6e9 < d.dead_at < time.time() + 3600
    assert sorted(queue.dead_letters()) == sorted((d.body, d.reason) for d in dead)
    [one] = queue.list_dead_letters(limit=1)
    assert one in dead
    assert sorted(queue.list_dead_letters(limit=5), key=lambda d: POISON.index(d.body)) == dead
    queue_factory.let_pass(LOCAL_VT + 1)
    assert queue.receive(wait=queue_factory.quiet_wait) == []  # listing leaves them dead
    with pytest.raises(InvalidInputError):
        queue.list_dead_letters(limit=0)


def test_redrive_by_id_then_all_sends_them_back_as_fresh_messages(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    first, second = dead_letter_poison(queue_factory, queue)
    assert queue.redrive([first.id]) == 1
    assert queue.list_dead_letters() == [second]
    [again] = drain(queue_factory, queue, 1)
    assert (again.body, again.deliveries) == (first.body, 1)
    queue.ack(again)
    assert queue.redrive() == 1
    assert queue.list_dead_letters() == [] and queue.dead_letters() == []
    [last] = drain(queue_factory, queue_factory.other(queue), 1)
    assert (last.body, last.deliveries) == (second.body, 1)
    assert queue.approximate_size() == 1
    queue.ack(last)
    assert queue.redrive() == 0  # a second redrive finds nothing to move
    assert queue.redrive([first.id, second.id]) == 0
    queue_factory.let_pass(LOCAL_VT + 1)
    assert queue.receive(wait=queue_factory.quiet_wait) == []
    assert queue.approximate_size() == 0


def test_redrive_of_unknown_ids_moves_nothing(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    assert queue.redrive() == 0 and queue.redrive(["no-such-id"]) == 0  # nothing dead yet
    dead = dead_letter_poison(queue_factory, queue)
    assert queue.redrive(["no-such-id", ""]) == 0
    assert queue.redrive([]) == 0
    assert queue.redrive(iter(())) == 0
    for bad in (dead[0].id, 42, [dead[0].id, 7]):  # one str is not an iterable of ids
        with pytest.raises(InvalidInputError):
            queue.redrive(bad)  # type: ignore[arg-type]
    queue_factory.let_pass(LOCAL_VT + 1)
    assert queue.receive(wait=queue_factory.quiet_wait) == []
    assert sorted(queue.list_dead_letters(), key=lambda d: POISON.index(d.body)) == dead
    assert queue.redrive(d.id for d in dead) == 2  # any iterable of ids
    assert sorted(m.body for m in drain(queue_factory, queue, 2)) == sorted(POISON)


def test_concurrent_redrives_move_each_dead_letter_once(queue_factory: QueueFactory) -> None:
    queue = queue_factory(visibility_timeout=30)
    bodies = [f'{{"dead": {i}}}' for i in range(12)]
    for body in bodies:
        queue.send(body)
    for message in drain(queue_factory, queue, len(bodies)):
        queue.dead_letter(message, "poison")
    moved: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def redrive(handle: Queue) -> None:
        try:
            barrier.wait(10)
            moved.append(handle.redrive())
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=redrive, args=(queue_factory.other(queue),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not errors and sum(moved) == len(bodies)
    got = drain(queue_factory, queue, len(bodies))
    assert sorted(m.body for m in got) == sorted(bodies) and all(m.deliveries == 1 for m in got)
    assert queue.list_dead_letters() == [] and queue.approximate_size() == len(bodies)


def test_oversize_and_non_text_bodies_are_refused_before_sending(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    limit = queue.max_body_bytes
    for body in ("x" * (limit + 1), "é" * (limit // 2 + 1), "😀" * (limit // 4 + 1)):
        with pytest.raises(LimitExceededError, match=str(limit)):
            queue.send(body)
    for bad in (b"{}", None, 42, {"a": 1}, "lone \ud800 surrogate"):
        with pytest.raises(InvalidInputError):
            queue.send(bad)  # type: ignore[arg-type]
    assert queue.approximate_size() == 0


def test_bad_arguments_are_refused(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    with pytest.raises(InvalidInputError):
        queue.send("x", delay=-1)
    with pytest.raises(InvalidInputError):
        queue.receive(max_messages=0)
    with pytest.raises(InvalidInputError):
        queue.receive(visibility_timeout=-5)
    with pytest.raises(InvalidInputError):
        queue.dead_letter(Message("id", "b", 1, "r"), "")


def test_receive_returns_empty_on_timeout_and_respects_max_messages(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    assert queue.receive(wait=0.3) == []
    for i in range(5):
        queue.send(str(i))
    seen: list[Message] = []
    deadline = time.monotonic() + 15
    while len(seen) < 5 and time.monotonic() < deadline:
        batch = queue.receive(max_messages=3, wait=0.5)
        assert len(batch) <= 3
        seen += batch
    assert sorted(m.body for m in seen) == ["0", "1", "2", "3", "4"]
    assert len({m.id for m in seen}) == 5


def test_approximate_size_counts_visible_and_in_flight(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    for body in ("a", "b", "c"):
        queue.send(body)
    assert queue.approximate_size() == 3
    [message] = drain(queue_factory, queue, 1)
    assert queue.approximate_size() == 3
    queue.ack(message)
    assert queue.approximate_size() == 2


def test_concurrent_consumers_get_each_message_exactly_once(queue_factory: QueueFactory) -> None:
    queue = queue_factory(visibility_timeout=30)
    expected = [f'{{"n": {i}}}' for i in range(50)]
    for body in expected:
        queue.send(body)
    received: list[Message] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consumer(handle: Queue) -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    if len(received) >= len(expected):
                        return
                for message in handle.receive(max_messages=2, wait=0.5):
                    with lock:
                        received.append(message)
                    handle.ack(message)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=consumer, args=(queue_factory.other(queue),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not errors
    assert sorted(m.body for m in received) == sorted(expected)
    assert all(m.deliveries == 1 for m in received)
    assert queue.approximate_size() == 0


def test_consume_yields_until_the_stop_event_is_set(queue_factory: QueueFactory) -> None:
    queue = queue_factory()
    for body in ("a", "b", "c"):
        queue.send(body)
    stop = threading.Event()
    got: list[str] = []
    for message in queue.consume(wait=0.5, stop=stop):
        got.append(message.body)
        queue.ack(message)
        if len(got) == 3:
            stop.set()
    assert sorted(got) == ["a", "b", "c"]

    stop_idle = threading.Event()
    idle = threading.Thread(target=lambda: list(queue.consume(wait=0.5, stop=stop_idle)))
    idle.start()
    stop_idle.set()
    idle.join(10)
    assert not idle.is_alive()


@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_an_operator_lists_and_redrives_dead_letters_on_either_api(
    queue_factory: QueueFactory, flavour: str
) -> None:
    """``admin.dead_letters``/``redrive`` and their twins: the asyncio ones on the queue's SDK
    client where it has one (its registry twin), else on threads."""
    queue = queue_factory()
    for body in ("first", "second"):
        queue.send(body)
    for message in queue.receive(max_messages=2, wait=2.0):
        queue.dead_letter(message, f"reason {message.body}")
    if flavour == "blocking":
        listed = admin.dead_letters(queue)
        moved = admin.redrive(queue, [dead.id for dead in listed if dead.body == "first"])
        left = admin.dead_letters(queue)
    else:
        twin = async_queue_twin(queue)

        async def operate() -> tuple[list[DeadLetter], int, list[DeadLetter]]:
            try:
                found = await admin.adead_letters(twin)
                count = await admin.aredrive(twin, [dead.id for dead in found if dead.body == "first"])
                return found, count, await admin.adead_letters(twin)
            finally:
                if not isinstance(twin, ThreadedQueue):  # an SDK twin: clients of its own
                    await twin.close()

        listed, moved, left = LOOP.run(operate())
    assert sorted((dead.body, dead.reason) for dead in listed) == [
        ("first", "reason first"),
        ("second", "reason second"),
    ]
    assert moved == 1
    assert [dead.body for dead in left] == ["second"]
    back = queue.receive(wait=2.0)
    assert [message.body for message in back] == ["first"]
