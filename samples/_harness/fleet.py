"""The processes a demo runs, SIGKILLs and restarts: a supervisor and a killer for crash tests.

Kept apart from the clients: the chaos suite drives a :class:`Fleet` and a :class:`Killer` with
loads of its own.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the ``samples`` package: child processes need it on their path."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False)
class Child:
    """One supervised process: an API server (with its port) or a queue worker."""

    kind: str
    argv: list[str]
    port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None


class Fleet:
    """Child processes (``python ARGV``) that a crash test SIGKILLs and restarts.

    Like a supervisor, :meth:`revive` restarts the children that exited on
    their own; ``exits`` counts them by ``(kind, exit status)``.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")]))
        self.children: list[Child] = []
        self.kills: Counter[str] = Counter()
        self.exits: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()

    def start(self, kind: str, argv: list[str], port: int | None = None) -> Child:
        child = Child(kind, argv, port)
        with self._lock:
            self.children.append(child)
            self._launch(child)
        return child

    def server(self, argv: list[str]) -> str:
        """Start ``argv --port P`` on a free port; its URL, once it answers ``/healthz``."""
        port = free_port()
        self.start("server", [*argv, "--port", str(port)], port)
        return f"http://127.0.0.1:{port}"

    def _launch(self, child: Child, *, ready: bool = True) -> None:
        """Start ``child``; a server is waited for until it answers, unless not ``ready`` (a restart:
        the clients retry meanwhile, and a crash test's killer must not wait out a slow start)."""
        if child.log is not None:
            child.log.close()
        child.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop() or the next launch
        child.process = subprocess.Popen(
            [sys.executable, *child.argv], env=self.env, stdout=child.log, stderr=subprocess.STDOUT
        )
        if child.port is not None and ready:
            _wait_ready(child)

    def kill(self, child: Child) -> None:
        """SIGKILL ``child`` (no chance to clean up) and start it again."""
        with self._lock:
            assert child.process is not None
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGKILL)
                child.process.wait()
                self.kills[child.kind] += 1
            else:  # it ended on its own meanwhile
                self.exits[child.kind, child.process.returncode] += 1
            self._launch(child, ready=False)

    def revive(self) -> None:
        """Restart every child that exited on its own."""
        with self._lock:
            for child in self.children:
                if child.process is not None and child.process.poll() is not None:
                    self.exits[child.kind, child.process.returncode] += 1
                    self._launch(child)

    def stop(self) -> None:
        """Ask every child to stop (SIGTERM: workers finish what they hold), then make sure."""
        with self._lock:
            for child in self.children:
                if child.process is not None and child.process.poll() is None:
                    child.process.terminate()
            for child in self.children:
                if child.process is not None:
                    try:
                        child.process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        child.process.kill()
                        child.process.wait()
                if child.log is not None:
                    child.log.close()


def _wait_ready(child: Child, timeout: float = 30.0) -> None:
    assert child.process is not None and child.log is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process.poll() is not None:
            child.log.seek(0)
            output = child.log.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"{' '.join(child.argv[:4])} exited ({child.process.returncode}): {output}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{child.port}/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {child.port} did not answer within {timeout} s")


class Killer:
    """SIGKILLs (and restarts) a random child of ``fleet`` each time ``progress()`` passes a threshold.

    The thresholds are drawn from the middle of ``total``, so every kill lands
    while requests are in flight. Meanwhile it restarts the children that
    exited on their own (:meth:`Fleet.revive`).
    """

    def __init__(self, fleet: Fleet, kills: int, total: int, rng: random.Random) -> None:
        room = range(max(1, total // 20), max(2, total * 9 // 10))
        self.thresholds = sorted(rng.sample(room, min(kills, len(room))))
        self.fleet, self.rng = fleet, rng
        self._stop = threading.Event()

    @contextlib.contextmanager
    def watching(self, progress: Callable[[], int]) -> Iterator[None]:
        thread = threading.Thread(target=self._run, args=(progress,), name="killer", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def _run(self, progress: Callable[[], int]) -> None:
        kinds = sorted({child.kind for child in self.fleet.children})
        killed = 0
        while not self._stop.wait(0.005):
            self.fleet.revive()
            if self.thresholds and progress() >= self.thresholds[0]:
                self.thresholds.pop(0)
                time.sleep(self.rng.uniform(0, 0.03))  # land anywhere inside a request
                kind = kinds[killed % len(kinds)]  # take turns: servers, then workers, ...
                self.fleet.kill(
                    self.rng.choice([child for child in self.fleet.children if child.kind == kind])
                )
                killed += 1


__all__ = [
    "ROOT",
    "Child",
    "Fleet",
    "Killer",
    "free_port",
]
