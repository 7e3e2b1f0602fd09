"""Azurite, Azure Storage's emulator, as a test bed's server: its tables and queues in memory
on free loopback ports, and the store and queue URLs a test reaches them by.

Azurite is an npm package (``make setup`` installs it into ``.tools``, or
``IDEMFLOW_AZURITE`` names it); it is started as :mod:`idemflow.testing.servers` says, with its
own check of being ready (it says so on its output), so it has a module of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from idemflow.async_worklist.queues.base import Queue
from idemflow.testing._loopback import ROOT, free_port, stop_process
from idemflow.testing._server_protocol import Clock

AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


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
