"""AsyncAzureQueue against a real Azurite: the whole queue contract, and what only it has.

The contract (``tests/conformance/test_queue_contract.py``) is imported and run
unchanged: its ``queue_factory`` fixture is overridden here, for Azure only,
by a blocking facade (:class:`tests.support.blocking_queue.BlockingQueue`) over the
asynchronous twin of an ``AzureQueue`` on the same queue (which answers
``list_dead_letters`` and ``redrive``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from idemflow.async_worklist.queues.async_adapters import is_async_queue, to_async_queue
from idemflow.errors import ConfigurationError, InvalidInputError, InvalidNameError, TransientError
from idemflow.testing.servers import AZURITE_KEY, Azurite, free_port
from idemflow.worker import AsyncAzureQueue, AsyncQueue, AzureQueue, Queue
from tests.async_worklist.test_queues import test_a_stale_holder_cannot_ack_extend_nack_or_dead_letter  # noqa: F401 - run here
from tests.conformance.test_queue_contract import *  # noqa: F403 - the contract, run on the async queue
from tests.conformance.test_queue_contract import QueueFactory
from tests.support.blocking_queue import BlockingQueue

pytestmark = pytest.mark.cloud


def _name() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["azure"])
def queue_factory(request: pytest.FixtureRequest, azurite: Azurite) -> Iterator[QueueFactory]:
    """The contract's factory, each queue the async twin of an AzureQueue behind a blocking facade."""
    conn = azurite.connection_string

    def build(name: str, vt: float) -> Queue:
        blocking = AzureQueue(name, connection_string=conn, visibility_timeout=vt)
        return BlockingQueue(AsyncAzureQueue.twin_of(blocking), blocking)

    factory = QueueFactory(str(request.param), build, None, (_name() for _ in iter(int, 1)))
    yield factory
    for queue in factory.opened:
        queue.close()


@pytest.fixture
def stale_setup(azurite: Azurite) -> Iterator[tuple[Queue, None]]:
    """The stale-holder test of tests/async_worklist/test_queues.py on the async queue (real time on
    Azurite)."""
    blocking = AzureQueue(_name(), connection_string=azurite.connection_string, visibility_timeout=1)
    queue = BlockingQueue(AsyncAzureQueue.twin_of(blocking), blocking)
    yield queue, None
    queue.close()


def test_the_async_queue_is_an_async_queue_with_its_twins_settings(azurite: Azurite) -> None:
    blocking = AzureQueue(
        _name(), connection_string=azurite.connection_string, visibility_timeout=7, retry_total=1
    )
    twin = AsyncAzureQueue.twin_of(blocking)
    assert blocking._options == {"create": True, "retry_total": 1}
    typed: AsyncQueue = twin
    assert is_async_queue(typed) and to_async_queue(twin) is twin
    assert (twin.name, twin.visibility_timeout, twin.max_body_bytes) == (
        blocking.name,
        7.0,
        blocking.max_body_bytes,
    )
    assert repr(twin) == f"AsyncAzureQueue({blocking.name!r})" and AZURITE_KEY[:12] not in repr(twin)

    async def scenario() -> None:
        try:
            await twin.send("from the loop")
            assert [m.body for m in blocking.receive(wait=2)] == ["from the loop"]
        finally:
            await twin.close()

    asyncio.run(scenario())
    blocking.close()


def test_a_closed_port_gives_the_blocking_queues_error(azurite: Azurite) -> None:
    down = azurite.connection_string.replace(f":{azurite.queue_port}/", f":{free_port()}/")
    name = _name()
    with pytest.raises(TransientError) as blocking_error:
        AzureQueue(name, connection_string=down, retry_total=0)

    async def scenario() -> None:
        queue = AsyncAzureQueue(name, connection_string=down, retry_total=0)
        try:
            for _ in range(2):  # creation is tried again on the next call
                with pytest.raises(TransientError) as async_error:
                    await queue.send("x")
                assert str(async_error.value) == str(blocking_error.value)
            uncreated = AsyncAzureQueue(name, connection_string=down, retry_total=0, create=False)
            with pytest.raises(TransientError, match=r"^receive on .*cannot reach"):
                await uncreated.receive()
            await uncreated.close()
        finally:
            await queue.close()

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 10


def test_a_missing_queue_without_create_names_the_fix(azurite: Azurite) -> None:
    async def scenario() -> None:
        queue = AsyncAzureQueue(_name(), connection_string=azurite.connection_string, create=False)
        try:
            with pytest.raises(ConfigurationError, match="does not exist"):
                await queue.send("x")
        finally:
            await queue.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: AsyncAzureQueue("Jobs", connection_string="UseDevelopmentStorage=true"), InvalidNameError),
        (lambda: AsyncAzureQueue("jobs", connection_string="AccountKey=" + AZURITE_KEY), ConfigurationError),
        (
            lambda: AsyncAzureQueue(
                "jobs", connection_string="UseDevelopmentStorage=true", visibility_timeout=0
            ),
            InvalidInputError,
        ),
    ],
)
def test_bad_names_strings_and_timeouts_fail_at_construction(
    make: Callable[[], AsyncAzureQueue], error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        make()
    assert AZURITE_KEY[:12] not in str(caught.value)


def test_bad_arguments_fail_before_anything_reaches_azure(azurite: Azurite) -> None:
    down = azurite.connection_string.replace(f":{azurite.queue_port}/", f":{free_port()}/")

    async def scenario() -> None:
        queue = AsyncAzureQueue(_name(), connection_string=down, retry_total=0)
        try:
            with pytest.raises(InvalidInputError):
                await queue.send("x", delay=-1)
            with pytest.raises(InvalidInputError):
                await queue.receive(max_messages=0)
        finally:
            await queue.close()

    asyncio.run(scenario())


def test_close_is_idempotent(azurite: Azurite) -> None:
    async def scenario() -> None:
        queue = AsyncAzureQueue(_name(), connection_string=azurite.connection_string)
        await queue.close()  # never used: nothing to close but the service client
        used = AsyncAzureQueue(_name(), connection_string=azurite.connection_string)
        await used.send("x")
        assert await used.approximate_size() == 1
        await used.close()
        await used.close()

    asyncio.run(scenario())


def test_receive_with_wait_returns_empty_on_an_empty_queue_without_blocking_the_loop(
    azurite: Azurite,
) -> None:
    async def scenario() -> None:
        queue = AsyncAzureQueue(_name(), connection_string=azurite.connection_string)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.create_task(ticker())
        try:
            started = time.monotonic()
            assert await queue.receive(max_messages=3, wait=0.6) == []
            assert 0.55 <= time.monotonic() - started < 5
            assert ticks >= 20  # the loop ran other work through the polls
        finally:
            beat.cancel()
            await queue.close()

    asyncio.run(scenario())


def test_concurrent_first_calls_create_the_queues_once(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    creations: list[str] = []

    async def scenario() -> None:
        queue = AsyncAzureQueue(_name(), connection_string=azurite.connection_string)
        create = queue._create
        monkeypatch.setattr(queue, "_create", lambda: creations.append("create") or create())
        try:
            await asyncio.gather(*(queue.send(str(i)) for i in range(5)))
            assert creations == ["create"]
            assert await queue.approximate_size() == 5
            got = await queue.receive(max_messages=5, wait=2)
            assert sorted(m.body for m in got) == ["0", "1", "2", "3", "4"]
            extended = await queue.extend(got[0], 60)
            await queue.dead_letter(extended, "poison")
            for message in got[1:]:
                await queue.ack(message)
        finally:
            await queue.close()
        blocking = AzureQueue(queue.name, connection_string=azurite.connection_string)
        assert blocking.dead_letters() == [(got[0].body, "poison")]
        blocking.close()

    asyncio.run(scenario())
