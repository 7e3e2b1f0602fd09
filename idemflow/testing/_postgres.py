"""A throwaway PostgreSQL server on loopback for the test suites: Debian's package, started in a
temporary directory by an unprivileged user and removed at the end of the session.

Why a server of our own rather than one already running: the suites must set themselves up from
nothing, on any machine ``make setup`` prepared, and leave nothing behind. ``initdb`` and
``pg_ctl`` refuse to run as root, so a root test run starts them as the ``postgres`` user the
package creates (``runuser``), on a directory that user owns. ``fsync`` stays on: the crash
suites kill clients, not the server, but a test that restarts the server must find every
committed row, as production would.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from idemflow.testing._loopback import free_port

BIN_GLOB = "/usr/lib/postgresql/*/bin"
"""Where Debian's ``postgresql`` package puts ``initdb`` and ``pg_ctl`` (not on PATH)."""


def postgres_bin() -> Path:
    """The newest installed server's binaries; :class:`RuntimeError` saying how to install one."""
    named = os.environ.get("IDEMFLOW_POSTGRES_BIN")
    found = [Path(named)] if named else sorted(Path(p) for p in glob.glob(BIN_GLOB))
    for folder in reversed(found):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    raise RuntimeError(
        "no PostgreSQL server found (looked in /usr/lib/postgresql/*/bin, or IDEMFLOW_POSTGRES_BIN): "
        "run `make setup`, which installs Debian's postgresql package"
    )


def _as_server_user(command: Sequence[str]) -> list[str]:
    """``command`` as the ``postgres`` user when running as root (the server refuses root)."""
    if os.geteuid() != 0:
        return list(command)
    return ["runuser", "-u", "postgres", "--", *command]


@dataclass(frozen=True)
class PostgresServer:
    """A started server: ``conninfo`` reaches its ``postgres`` database as the ``postgres`` user."""

    host: str
    port: int
    data: Path

    @property
    def conninfo(self) -> str:
        return f"postgresql://{self.host}:{self.port}/postgres?user=postgres"

    def url(self, **params: str) -> str:
        """A ``postgresql://`` store or queue URL of this server with ``params`` added."""
        extra = "".join(f"&{key}={value}" for key, value in params.items())
        return self.conninfo + extra

    def restart(self) -> None:
        """Stop the server (fast: open connections are cut) and start it again on the same port."""
        binaries = postgres_bin()
        subprocess.run(
            _as_server_user([str(binaries / "pg_ctl"), "-D", str(self.data), "stop", "-m", "fast", "-w"]),
            check=True,
            capture_output=True,
        )
        _start(binaries, self.data, self.port)


def _start(binaries: Path, data: Path, port: int) -> None:
    options = f"-p {port} -k {data.parent} -c listen_addresses=127.0.0.1 -c max_connections=400"
    log = str(data.parent / "log")
    subprocess.run(
        _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", log, "-w", "start"]),
        check=True,
        capture_output=True,
    )


@contextmanager
def run_postgres() -> Iterator[PostgresServer]:
    """A fresh server on a free loopback port for as long as the context lasts."""
    binaries = postgres_bin()
    home = Path(tempfile.mkdtemp(prefix="idemflow-pg-"))
    data = home / "data"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
    try:
        subprocess.run(
            _as_server_user([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
            check=True,
            capture_output=True,
        )
        port = free_port()
        _start(binaries, data, port)
        server = PostgresServer("127.0.0.1", port, data)
        try:
            yield server
        finally:
            subprocess.run(
                _as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate"]),
                capture_output=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)


__all__ = ["BIN_GLOB", "PostgresServer", "postgres_bin", "run_postgres"]
