"""What a test bed's server is to a test: a :class:`BackendServer` gives the URL of a fresh
store and a queue, and a :class:`Clock` is what a queue with the ``fake clock`` feature runs on.

Every server (memory, SQLite, moto, Azurite, DynamoDB Local) implements the protocol, so it is
written apart from all of them; :mod:`idemflow.testing.servers` gives it at its public path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from idemflow.async_worklist.queues.base import Queue


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
