"""A throwaway PostgreSQL server as a test bed's server: the Debian package's ``initdb`` and
``pg_ctl`` on a temporary directory, a free loopback port, stopped and removed at the end.

The server refuses to run as root, so when the tests do (CI's containers), every command runs as
the ``postgres`` user the package creates, on a directory it owns; otherwise as the current user.
One server serves a whole test session (one per xdist worker, as every server here); each test's
store gets a schema of its own (``?schema=`` of its URL), which costs a ``CREATE SCHEMA`` and
three tables' DDL, not the hundreds of milliseconds of a ``CREATE DATABASE``.

``fsync`` is off: a test restarts the server with a clean or an immediate stop, and the data is
in the operating system's page cache either way (only a machine's crash would need the flush).
The PostgreSQL queue's bed names the same server: its queues live in two tables of the same
database, apart from the stores' schemas, each test's queue under a name of its own.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from idemflow.async_worklist.queues.base import Queue
from idemflow.testing._loopback import free_port
from idemflow.testing._server_protocol import Clock

DATABASE = "postgres"
"""The database every test store is in (the one ``initdb`` makes): a schema per test inside it."""
SETTINGS = ("-c max_connections=300", "-c shared_buffers=32MB")


def postgres_bin() -> Path:
    """The folder of ``initdb`` and ``pg_ctl`` (``IDEMFLOW_POSTGRES_BIN``, else the newest Debian
    package's); ``make setup`` installs the package when none is there."""
    named = os.environ.get("IDEMFLOW_POSTGRES_BIN")
    found = [named] if named else sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True)
    for folder in found:
        if os.path.exists(os.path.join(folder, "initdb")):
            return Path(folder)
    raise RuntimeError("PostgreSQL is not installed: run `make setup` (apt-get install postgresql)")


def _major(folder: str) -> int:
    name = Path(folder).parent.name
    return int(name) if name.isdigit() else 0


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server: where it listens and how to stop and start it again."""

    port: int
    data: Path
    log: Path
    bin: Path
    user: str | None
    """Who runs the server's commands (``postgres`` when the tests run as root, else None: the caller)."""
    fsync: bool
    """Whether the server flushes its WAL (off for tests: see the module docstring)."""
    host: str = "127.0.0.1"

    @property
    def conninfo(self) -> str:
        """A libpq URI of the session's database, for stores and queues alike."""
        return f"postgresql://{self.host}:{self.port}/{DATABASE}?user=postgres"

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return f"{self.conninfo}&schema={prefix}"

    def url(self, **params: str) -> str:
        """A ``postgresql://`` URL of the session's database with ``params`` added to its query."""
        return self.conninfo + "".join(f"&{key}={value}" for key, value in params.items())

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        from idemflow.async_worklist.queues.postgres import PostgresQueue  # the [postgres] extra

        if clock is None:
            return PostgresQueue(self.conninfo, name=name, visibility_timeout=visibility_timeout)
        return PostgresQueue(
            self.conninfo,
            name=name,
            visibility_timeout=visibility_timeout,
            clock=clock.time,
            sleep=clock.sleep,
        )

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        return self.url(name=name, visibility_timeout=str(visibility_timeout))

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl -D DATA args`` as the server's user (``start`` and ``stop`` wait)."""
        _run(self.user, [str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", *args])

    def start(self) -> None:
        fsync = f"-c fsync={'on' if self.fsync else 'off'}"
        options = " ".join(
            [f"-p {self.port}", f"-k {self.data}", "-c listen_addresses=127.0.0.1", fsync, *SETTINGS]
        )
        self.pg_ctl("-o", options, "-l", str(self.log), "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (clean) or ``immediate`` (as a crash: recovery at the next start)."""
        self.pg_ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()


def _run(user: str | None, cmd: list[str]) -> None:
    full = ["runuser", "-u", user, "--", *cmd] if user else cmd
    done = subprocess.run(full, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:1] + cmd[-1:])} failed: {done.stdout[-1500:]}{done.stderr[-1500:]}"
        )


@contextmanager
def postgres_server(*, fsync: bool = False) -> Iterator[PostgresServer]:
    """A PostgreSQL server on a free loopback port until the block ends, its files removed after
    (``fsync``: flush the WAL, as a server in production does; benchmarks turn it on)."""
    folder = bin_folder = postgres_bin()
    user = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="idemflow-pg-"))
    try:
        if user:
            shutil.chown(root, user)
        data = root / "data"
        _run(
            user,
            [str(folder / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-N", "-E", "UTF8"],
        )
        for attempt in range(3):
            server = PostgresServer(free_port(), data, root / "server.log", bin_folder, user, fsync)
            try:
                server.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        try:
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["DATABASE", "PostgresServer", "postgres_bin", "postgres_server"]
