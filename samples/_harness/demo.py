"""A sample's ``demo`` command: servers and workers on one store and queue, killed under load, then
``check`` of the tables; and the report of what it found.

Every sample's demo is this one crash cycle with its own load and check, so it lives here once.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from idemflow import open_store
from idemflow.stores import Store
from samples._harness.clients import HttpClient
from samples._harness.fleet import Fleet, Killer
from samples.transfer.demo_run import reset


class Verdict(Protocol):
    """What a sample's ``check`` returns."""

    @property
    def ok(self) -> bool: ...

    def lines(self) -> list[str]: ...


SettingsT = TypeVar("SettingsT")
VerdictT = TypeVar("VerdictT", bound=Verdict)


@dataclass
class LoadReport(Generic[SettingsT]):
    """What the clients of a load saw (a sample adds its counts); ``problems`` is empty when their
    answers were consistent. ``sent`` counts every copy of the main requests (responses, bids)."""

    settings: SettingsT
    sent: int = 0
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        raise NotImplementedError


LoadT = TypeVar("LoadT", bound=LoadReport[Any])


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """The processes of a demo; without ``store``/``queue`` URLs, fresh SQLite files in ``data``."""

    data: Path = Path("demo-data")
    store: str | None = None
    queue: str | None = None
    servers: int = 2
    workers: int = 2
    kills: int = 6
    server: tuple[str, ...] = ()
    """A server's command after ``python`` (``--store``, ``--queue`` and ``--port`` follow); default
    ``-m samples.<sample> serve``."""
    worker: tuple[str, ...] = ()
    """A worker's command after ``python`` (``--store`` and ``--queue`` follow); default
    ``-m idemflow.cli worker samples.<sample>.workflows:WORKFLOWS --concurrency 2``."""


@dataclass(frozen=True, slots=True)
class Crashes:
    """What the processes of a demo went through."""

    kills: Mapping[str, int]
    """SIGKILLs by kind of process (``server``, ``worker``)."""
    exits: Mapping[tuple[str, int], int]
    """Processes that exited on their own and were restarted, by kind and exit status."""
    retries: int
    """Requests the clients sent again (connection lost, 503)."""

    def line(self) -> str:
        kills = sum(self.kills.values())
        exits = sum(self.exits.values())
        restarted = f"; {exits} more exited on their own, restarted" if exits else ""
        return (
            f"  crashes   {kills} SIGKILLs ({self.kills.get('server', 0)} API servers, "
            f"{self.kills.get('worker', 0)} workers), each restarted{restarted}; "
            f"clients retried {self.retries} times"
        )


@dataclass(frozen=True, slots=True)
class DemoReport(Generic[SettingsT, LoadT, VerdictT]):
    """What a demo did and found: the clients' view (``load``), ``check`` of the tables (``verdict``)."""

    settings: SettingsT
    store: str
    """The store, as a report names it: the SQLite URL of a demo's own file, else just its kind."""
    load: LoadT
    verdict: VerdictT
    crashes: Crashes
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.load.problems

    def text(self, title: str, setup: str, head: int, passed: str, extra: Sequence[str] = ()) -> str:
        """The report for people: ``title``, ``setup``, the load's first ``head`` lines, the crashes,
        the rest of the load's lines, ``extra`` lines and the verdict's, ending in PASS (``passed``)
        or FAIL."""
        lines = [
            title,
            f"  setup     {setup}",
            *self.load.lines()[:head],
            self.crashes.line(),
            *self.load.lines()[head:],
            *extra,
            *self.verdict.lines(),
            *(f"  - {problem}" for problem in self.load.problems[:10]),
        ]
        verdict, tail = ("PASS", passed) if self.ok else ("FAIL", "see the problems above")
        return "\n".join([*lines, f"{verdict} in {self.seconds:.1f} s: {tail}"])


DEMO_VISIBILITY_TIMEOUT = 2.0
"""The visibility timeout of a demo's own SQLite queue: a SIGKILLed worker's messages come back
after it, so short that the demo does not wait long for them."""

Kills = Callable[[Fleet], AbstractContextManager[object]]
"""A demo's killer: SIGKILLs (and restarts) processes of the fleet while its context is open."""


def open_with(url: str, tables: Sequence[str]) -> Store:
    """The store at ``url``, its tables created."""
    store = open_store(url)
    store.create_tables(*tables)
    return store


def run_demo(
    settings: FleetSettings,
    sample: str,
    tables: Sequence[str],
    check: Callable[[Store], VerdictT],
    *,
    total: int,
    seed: int,
    load: Callable[[HttpClient], LoadT],
    kills: Kills | None = None,
) -> tuple[str, LoadT, VerdictT, Crashes, float]:
    """A sample's demo: servers and workers on one store and queue, SIGKILLed while
    ``load(client)`` runs; then ``check`` of the tables.

    Returns the :class:`DemoReport` fields after ``settings``. ``total``
    estimates the requests the load sends (the kills land in its middle);
    the servers and workers share a fresh signing key. ``kills`` replaces the
    default :class:`Killer` (``settings.kills`` kills at thresholds of ``total``).
    """
    started = time.monotonic()
    store_url, queue = settings.store, settings.queue
    if store_url is None:
        reset(settings.data / f"{sample}.sqlite3")
        store_url = f"sqlite:{settings.data / f'{sample}.sqlite3'}"
    if queue is None:
        path = settings.data / f"{sample}-queue.sqlite3"
        reset(path)
        queue = f"sqlite:{path}?visibility_timeout={DEMO_VISIBILITY_TIMEOUT:g}"
    shown = store_url if settings.store is None else store_url.split(":", 1)[0] + " store"
    store = open_with(store_url, tables)
    server = settings.server or ("-m", f"samples.{sample}", "serve")
    worker = settings.worker or (
        "-m",
        "idemflow.cli",
        "worker",
        f"samples.{sample}.workflows:WORKFLOWS",
        "--concurrency",
        "2",
    )
    fleet = Fleet({"IDEMFLOW_SIGNING_KEY": secrets.token_hex(16)})
    try:
        try:
            places = ["--store", store_url, "--queue", queue]
            urls = [fleet.server([*server, *places]) for _ in range(settings.servers)]
            for _ in range(settings.workers):
                fleet.start("worker", [*worker, *places])
            client = HttpClient(urls)
            killing: AbstractContextManager[object]
            if kills is None:
                killing = Killer(fleet, settings.kills, total, random.Random(seed)).watching(
                    lambda: client.sent
                )
            else:
                killing = kills(fleet)
            with killing:
                report = load(client)
        finally:
            fleet.stop()
        verdict = check(store)
    finally:
        store.close()
    crashes = Crashes(dict(fleet.kills), dict(fleet.exits), client.retries)
    return shown, report, verdict, crashes, time.monotonic() - started


__all__ = [
    "DEMO_VISIBILITY_TIMEOUT",
    "Crashes",
    "DemoReport",
    "FleetSettings",
    "Kills",
    "LoadReport",
    "Verdict",
    "open_with",
    "run_demo",
]
