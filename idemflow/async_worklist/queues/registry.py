"""The queue backends: one entry each, as the store registry's (:mod:`idemflow.stores.registry`).

``open_queue``/``open_async_queue`` look schemes up here; the queue contract
suite takes every test bed. A bed with :attr:`~idemflow.stores.registry.Feature.FAKE_CLOCK`
runs on the test's clock.

>>> [bed.kind for _, bed in QUEUES.beds()]
['memory', 'sqlite', 'sqs', 'azure', 'postgres']
>>> QUEUES.for_scheme("postgres").schemes
('postgresql', 'postgres')
"""

from __future__ import annotations

from idemflow.stores.registry import LIBPQ_PARAMETERS, Backend, Feature, Registry, TestBed

_OPENERS = "idemflow.async_worklist.queues._openers"
_SERVERS = "idemflow.testing.servers"
_EVERY = frozenset({"visibility_timeout", "lanes"})
_CLOUD = frozenset({Feature.SERVER, Feature.SHARED})
_LOCAL_SERVER = frozenset({Feature.SERVER, Feature.SHARED, Feature.FAKE_CLOCK})
"""A server on loopback whose queue reads the client's clock (PostgreSQL: ``visible_at`` is the
client's time, as SQLite's), so the test's clock moves it."""

QUEUES = Registry(
    "queue",
    [
        Backend(
            name="memory",
            schemes=("memory",),
            parameters=_EVERY,
            usage="memory:",
            opener=f"{_OPENERS}:open_memory",
            blocking_class="idemflow.async_worklist.queues.memory:MemoryQueue",
            test_beds=(TestBed("memory", f"{_SERVERS}:in_memory", frozenset({Feature.FAKE_CLOCK})),),
        ),
        Backend(
            name="sqlite",
            schemes=("sqlite",),
            parameters=_EVERY | {"name"},
            usage="sqlite:PATH",
            opener=f"{_OPENERS}:open_sqlite",
            blocking_class="idemflow.async_worklist.queues.sqlite:SqliteQueue",
            test_beds=(
                TestBed("sqlite", f"{_SERVERS}:on_disk", frozenset({Feature.FAKE_CLOCK, Feature.SHARED})),
            ),
        ),
        Backend(
            name="sqs",
            schemes=("sqs",),
            parameters=_EVERY | {"endpoint", "region", "create"},
            usage="sqs:NAME",
            opener=f"{_OPENERS}:open_sqs",
            blocking_class="idemflow.async_worklist.queues.sqs:SqsQueue",
            async_opener=f"{_OPENERS}:open_async_sqs",
            twin="idemflow.async_worklist.queues.sqs_async:AsyncSqsQueue.twin_of",
            extra="aws",
            test_beds=(TestBed("sqs", f"{_SERVERS}:moto_server", _CLOUD),),
        ),
        Backend(
            name="azure-queue",
            schemes=("azure-queue",),
            parameters=_EVERY | {"connection_string", "create"},
            usage="azure-queue:NAME",
            opener=f"{_OPENERS}:open_azure",
            blocking_class="idemflow.async_worklist.queues.azure_queue:AzureQueue",
            async_opener=f"{_OPENERS}:open_async_azure",
            twin="idemflow.async_worklist.queues.azure_queue_async:AsyncAzureQueue.twin_of",
            extra="azure",
            test_beds=(TestBed("azure", f"{_SERVERS}:azurite_server", _CLOUD),),
        ),
        Backend(
            name="postgres",
            schemes=("postgresql", "postgres"),
            parameters=_EVERY | {"name"} | LIBPQ_PARAMETERS,
            usage="postgresql://HOST[:PORT]/DATABASE?name=QUEUE",
            opener=f"{_OPENERS}:open_postgres",
            blocking_class="idemflow.async_worklist.queues.postgres:PostgresQueue",
            extra="postgres",
            test_beds=(TestBed("postgres", f"{_SERVERS}:postgres_server", _LOCAL_SERVER),),
        ),
    ],
)
"""The queue backends: :func:`idemflow.async_worklist.queues.open_queue` opens their URLs."""


__all__ = ["QUEUES"]
