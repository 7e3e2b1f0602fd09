"""One server of a kind for every pytest-xdist worker of a run, started by the controller.

Why: each worker's session would otherwise start its own DynamoDB Local (a JVM), Azurite and
PostgreSQL, so a run of eight workers starts eight of each, pays eight JIT warm-ups, and a
suite that mostly waits (timers, processes, polling) cannot be given more workers than its
servers' start-up costs allow. These servers serve any number of clients, each test in its
own tables, schema or prefix, so one of each is enough.

How: the controller (the process running ``pytest -n N``) makes a folder and hands it to each
worker (``workerinput``); a worker needing a shareable server writes a *want* file there and
waits; the controller's :class:`ServerBroker` thread starts the server in its own
:class:`~idemflow.testing.servers.ServerPool` and writes the server's description (a pickled
:class:`~idemflow.testing.servers.BackendServer`, plain ports and paths) for every worker to
read. The controller stops the servers when the run ends, after the last worker, so a worker
that finishes early cannot stop a server another is still using. moto is not shared: it serves
one request at a time (the isolation DynamoDB gives), so a worker keeps its own.

A test that restarts or stops a server starts a private one (``postgres_server()``), never the
shared one.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any

from idemflow.testing.servers import ServerPool

SHAREABLE = frozenset(
    {
        "idemflow.testing.servers:dynamodb_local_server",
        "idemflow.testing.servers:azurite_server",
        "idemflow.testing.servers:postgres_server",
    }
)
"""Starters whose server serves every worker: many clients at once, each in its own namespace."""

WORKER_INPUT = "idemflow_shared_servers"
"""The ``workerinput`` key naming the folder workers and the controller meet in."""

START_TIMEOUT = 300.0
"""Seconds a worker waits for the controller to start a server (a JVM on a loaded machine)."""


def _key(starter: str) -> str:
    return hashlib.sha256(starter.encode()).hexdigest()[:16]


def _write_atomically(path: Path, data: bytes) -> None:
    """Readers see the whole file or none (a rename within one folder is atomic)."""
    part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
    part.write_bytes(data)
    part.replace(path)


class ServerBroker:
    """The controller's side: starts each server a worker asks for, once, and stops them all."""

    def __init__(self, folder: Path, poll: float = 0.05) -> None:
        self.folder = folder
        self._poll = poll
        self._pool = ServerPool()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="idemflow-server-broker", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        done: set[str] = set()
        while not self._stop.is_set():
            for want in sorted(self.folder.glob("*.want")):
                key = want.stem
                if key in done:
                    continue
                done.add(key)
                starter = want.read_text()
                try:
                    before = dict(os.environ)
                    server = self._pool.get(starter)
                    # What the starter set for its clients (DynamoDB's dummy credentials) goes along.
                    added = {name: value for name, value in os.environ.items() if before.get(name) != value}
                    _write_atomically(self.folder / f"{key}.ready", pickle.dumps((server, added)))
                except Exception as exc:  # noqa: BLE001 - any failure to start is handed to the waiting workers
                    _write_atomically(self.folder / f"{key}.error", f"{type(exc).__name__}: {exc}".encode())
            self._stop.wait(self._poll)

    def close(self) -> None:
        """Stop serving, then stop every server started (the workers have ended)."""
        self._stop.set()
        self._thread.join()
        self._pool.__exit__(None, None, None)


class SharedServerPool(ServerPool):
    """A worker's pool: shareable servers from the controller, the others (moto, files) its own."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self._folder = folder

    def get(self, starter: str) -> Any:
        if starter in SHAREABLE and starter not in self._started:
            # Held beside this pool's own servers but never entered: the controller stops it.
            self._started[starter] = self._ask(starter)
        return super().get(starter)

    def _ask(self, starter: str) -> Any:
        key = _key(starter)
        ready, error = self._folder / f"{key}.ready", self._folder / f"{key}.error"
        if not ready.exists():
            _write_atomically(self._folder / f"{key}.want", starter.encode())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if ready.exists():
                server, added = pickle.loads(ready.read_bytes())  # this run's controller wrote it
                for name, value in added.items():
                    os.environ.setdefault(name, value)
                return server
            if error.exists():
                raise RuntimeError(f"the shared {starter} failed to start: {error.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"the shared {starter} did not start within {START_TIMEOUT:g} s")


__all__ = ["SHAREABLE", "START_TIMEOUT", "WORKER_INPUT", "ServerBroker", "SharedServerPool"]
