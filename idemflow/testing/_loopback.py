"""A server process on loopback: a free port, waiting until the process listens on it, stopping
it, and where servers installed beside the checkout are found (:data:`ROOT`).

moto, Azurite and DynamoDB Local are each started as a process of their own, polled until they
accept connections and stopped at the end of the session; those steps are the same for all
three, so they live here.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
"""The source checkout (``.tools`` beside ``idemflow``), one place servers are looked for."""


def free_port() -> int:
    """A loopback port nothing listens on now (another process may still take it first)."""
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
    """Return once ``proc`` accepts connections on ``port``; :class:`RuntimeError` if it exits
    first or does not listen within ``timeout`` seconds."""
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
def run_process(cmd: list[str], ports: list[int], name: str, cwd: str | None = None) -> Iterator[None]:
    """Run ``cmd`` until the block ends, once it listens on every port of ``ports``; its output is
    kept for the error of a start that failed."""
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
