"""AsyncSqsQueue against moto server.

The whole queue contract (``tests/conformance/test_queue_contract.py``) runs
against the asynchronous queue through a blocking facade
(:class:`tests.support.blocking_queue.BlockingQueue`), dead-letter tools delegated to
its blocking twin; the tests below cover what is its own: errors of an
unreachable endpoint, closing, lazy opening, waiting receives.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.config import Config

from idemflow.async_worklist.queues.async_adapters import is_async_queue
from idemflow.async_worklist.queues.base import Message
from idemflow.errors import (
    BackendError,
    ConfigurationError,
    InvalidInputError,
    InvalidNameError,
    TransientError,
)
from idemflow.testing.servers import Moto, free_port
from idemflow.worker import AsyncQueue, AsyncSqsQueue, SqsQueue
from tests import conformance
from tests.conformance.test_queue_contract import *  # noqa: F403 - the contract, run on this module's queue
from tests.conformance.test_queue_contract import QueueFactory
from tests.support.blocking_queue import BlockingQueue

pytestmark = [pytest.mark.cloud]


@pytest.fixture(params=["sqs"])  # type: ignore[no-redef]
def queue_factory(request: pytest.FixtureRequest, tmp_path: Path, moto: Moto) -> Iterator[QueueFactory]:
    """The contract's queues: AsyncSqsQueues behind blocking facades, each with its blocking twin."""
    names = (f"q{uuid.uuid4().hex[:12]}" for _ in iter(int, 1))

    def build(name: str, vt: float) -> BlockingQueue:
        sync = SqsQueue(name, endpoint_url=moto.endpoint, region_name=moto.region, visibility_timeout=vt)
        return BlockingQueue(AsyncSqsQueue.twin_of(sync), sync)

    factory = QueueFactory(str(request.param), build, None, names)
    yield factory
    for queue in factory.opened:
        queue.close()


def _name() -> str:
    return f"aio{uuid.uuid4().hex[:12]}"


def _queue(moto: Moto, **options: object) -> AsyncSqsQueue:
    return AsyncSqsQueue(_name(), endpoint_url=moto.endpoint, region_name=moto.region, **options)  # type: ignore[arg-type]


def test_every_contract_test_runs_here() -> None:
    contract = conformance.test_queue_contract
    names = {name for name in vars(contract) if name.startswith("test_")}
    assert len(names) == 21 and names <= set(globals())
    assert all(globals()[name] is getattr(contract, name) for name in names)


def test_it_is_an_async_queue_and_its_twin_reaches_the_same_queue(moto: Moto) -> None:
    sync = SqsQueue(_name(), endpoint_url=moto.endpoint, region_name=moto.region, visibility_timeout=7)
    twin = AsyncSqsQueue.twin_of(sync)
    assert is_async_queue(twin) and repr(twin) == f"AsyncSqsQueue({sync.name!r})"
    assert (twin.name, twin.visibility_timeout, twin.max_body_bytes) == (sync.name, 7.0, sync.max_body_bytes)
    typed: AsyncQueue = twin
    sync.send("from the blocking queue")

    async def main() -> None:
        [message] = await typed.receive(wait=5)
        assert (message.body, message.deliveries) == ("from the blocking queue", 1)
        await typed.dead_letter(message, "poison")
        assert await typed.approximate_size() == 0
        await typed.close()

    asyncio.run(main())
    assert sync.dead_letters() == [("from the blocking queue", "poison")]
    sync.close()


def test_unreachable_endpoint_is_transient() -> None:
    queue = AsyncSqsQueue(
        _name(),
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1),
    )

    async def main() -> None:
        with pytest.raises(TransientError, match=r"open on SQS queue .*cannot reach SQS"):
            await queue.send("x")
        with pytest.raises(TransientError, match="cannot reach SQS"):
            await queue.receive(wait=1)
        with pytest.raises(InvalidInputError):  # arguments are checked before anything is sent
            await queue.send("x", delay=-1)
        await queue.close()

    asyncio.run(main())


def test_missing_queue_without_create_and_missing_region_name_the_fix(
    moto: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = _queue(moto, create=False)

    async def main() -> None:
        with pytest.raises(ConfigurationError, match="does not exist; create it"):
            await queue.send("x")
        await queue.close()

    asyncio.run(main())
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ConfigurationError, match="cannot build an SQS client for queue 'jobs'"):
        AsyncSqsQueue("jobs")
    with pytest.raises(InvalidNameError):
        AsyncSqsQueue("jobs.fifo", region_name="us-east-1")


def test_close_is_idempotent_and_a_closed_queue_refuses_calls(moto: Moto) -> None:
    queue = _queue(moto)

    async def main() -> None:
        await queue.close()  # before first use: nothing to close
        queue2 = _queue(moto)
        await queue2.send("x")
        assert queue2.client is not None
        await queue2.close()
        await queue2.close()
        assert queue2.client is None
        with pytest.raises(BackendError, match="is closed"):
            await queue2.approximate_size()
        with pytest.raises(BackendError, match="is closed"):
            await queue.send("x")

    asyncio.run(main())


def test_the_queues_are_created_once_on_first_use(moto: Moto) -> None:
    queue = _queue(moto)
    assert queue.client is None  # no I/O before the first call
    sizes: list[int] = []

    async def main() -> None:
        await asyncio.gather(*(queue.send(str(i)) for i in range(5)))
        sizes.append(await queue.approximate_size())
        await queue.close()

    asyncio.run(main())
    assert sizes == [5]
    sync = SqsQueue(queue.name, endpoint_url=moto.endpoint, region_name=moto.region, create=False)
    assert sync.list_dead_letters() == []  # the -dlq exists too
    sync.close()


def test_receive_with_wait_returns_empty_on_an_empty_queue_without_blocking_the_loop(moto: Moto) -> None:
    queue = _queue(moto)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    async def main() -> list[Message]:
        await queue.approximate_size()  # opened
        task = asyncio.create_task(ticker())
        started = time.monotonic()
        try:
            got = await queue.receive(wait=1.2, max_messages=3)
        finally:
            task.cancel()
            await queue.close()
        assert time.monotonic() - started >= 1.1
        return got

    assert asyncio.run(main()) == []
    assert len(ticks) >= 10  # the loop kept running during the long poll and the short polls


def test_extend_of_a_deleted_message_is_lost_and_acks_of_it_are_quiet(moto: Moto) -> None:
    from idemflow import MessageLostError

    queue = _queue(moto)

    async def main() -> None:
        await queue.send("once")
        [message] = await queue.receive(wait=5)
        await queue.ack(message)
        await queue.ack(message)
        await queue.nack(message)
        with pytest.raises(MessageLostError, match="it is gone"):
            await queue.extend(message, 10)
        await queue.close()

    asyncio.run(main())
