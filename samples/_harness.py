"""The load-and-crash machinery the samples' command lines share.

- :class:`HttpClient` calls an API on one or more servers, retrying like a
  patient client (same ``Idempotency-Key``, next server); :func:`send_all`
  sends every request 2-4 times from concurrent users, copies racing and
  reordered; :func:`disagreements` finds copies answered differently;
  :func:`settle` waits for the workers to finish what was answered ``202``
  and puts the final answers in place; :class:`Progress` draws the bar.
- :class:`Fleet` runs child processes (API servers, ``idemflow worker``
  processes), SIGKILLs and restarts them, and restarts any that exit on
  their own, as a supervisor would; :class:`Killer` SIGKILLs a random one
  each time the load passes a threshold (a sample may bring its own killer);
  :func:`run_demo` is a whole demo's crash cycle: servers and workers on one
  store and queue, killed under load, then ``check``; :class:`DemoReport` and
  :class:`LoadReport` what it found.
- :class:`Sample`: the ``serve | load | check | demo`` command line every
  sample has (:meth:`Sample.main`), given the sample's API and commands.

>>> answers = {"r1": [Answer(200, {"n": 1}), Answer(200, {"n": 1})], "r2": [Answer(200), Answer(409)]}
>>> disagreements(answers)
["request 'r2' answered Answer(status=200, body={}) and Answer(status=409, body={})"]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, Protocol, TypeVar

import httpx

from idemflow import IdemflowError, Store, open_store
from idemflow.async_worklist import AsyncQueue, Queue
from idemflow.stores import AsyncStore
from samples._api import Answer, Direct, Service, serve
from samples.transfer.demo import reset

ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the ``samples`` package: child processes need it on their path."""


# -- clients ------------------------------------------------------------------------------------


class Progress:
    """A progress bar on stderr (thread-safe): redrawn in place on a terminal, else a line per quarter."""

    def __init__(self, total: int, label: str, stream: IO[str] | None = None) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._shown = -1.0 if self.tty else 0.0  # a time on a terminal, else the last quarter printed

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            mark = time.monotonic() if self.tty else float(4 * self.done // self.total)
            if (self.tty and mark - self._shown >= 0.1) or (not self.tty and mark > self._shown):
                self._draw()
                self._shown = mark

    def close(self) -> None:
        with self._lock:
            if self.tty or self._shown < 4:
                self._draw()
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        share = min(self.done / self.total, 1.0)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        bar = "#" * int(30 * share) + "." * (30 - int(30 * share))
        text = f"{self.label:>10} [{bar}] {share:4.0%} {self.done}/{self.total} {rate:6.1f}/s"
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        self.stream.flush()


class HttpClient:
    """Calls the API on one or more servers, retrying like a patient client.

    Connection errors, timeouts and 502/503/504 are retried with the *same*
    ``Idempotency-Key``, on the next server, until ``patience`` seconds have
    passed: safe, because the server runs the request under that key.
    """

    def __init__(self, urls: Sequence[str], *, timeout: float = 10.0, patience: float = 60.0) -> None:
        if not urls:
            raise ValueError("HttpClient needs at least one server URL")
        self.urls = [url.rstrip("/") for url in urls]
        self.timeout, self.patience = timeout, patience
        self.sent = self.retries = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(timeout=self.timeout)
        return client

    def request(
        self, method: str, path: str, *, key: str | None = None, body: object = None, params: Any = None
    ) -> Answer:
        """One request, retried until it gets a real answer (or ``patience`` runs out)."""
        headers = {"Idempotency-Key": key} if key is not None else {}
        with self._lock:
            start = self.sent
        deadline = time.monotonic() + self.patience
        attempt = 0
        while True:
            url = self.urls[(start + attempt) % len(self.urls)] + path
            try:
                got = self._client().request(method, url, json=body, headers=headers, params=params)
                if got.status_code not in (502, 503, 504):
                    with self._lock:
                        self.sent += 1
                    return Answer(got.status_code, got.json())
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                return Answer(503, {"error": "gave_up", "detail": f"no answer within {self.patience} s"})
            with self._lock:
                self.retries += 1
            attempt += 1
            time.sleep(random.uniform(0.5, 1.0) * min(0.01 * 2**attempt, 0.5))


Send = Callable[[], Answer]
"""One send of a request; every copy of a request calls the same ``Send``, so carries the same body."""


def send_all(
    requests: Sequence[tuple[str, Send]], *, users: int, rng: random.Random, label: str
) -> dict[str, list[Answer]]:
    """Send each request 2-4 times from ``users`` threads; the answers of its copies, by request id.

    The copies are placed a few positions apart, so duplicates race each
    other on different threads as well as arriving after the first finished.
    """
    spread = 2.0 * users
    placed = [(n + rng.uniform(0, spread), request) for n, request in enumerate(requests)]
    placed += [
        (position + rng.uniform(0, spread), request)
        for position, request in placed
        for _ in range(rng.randint(1, 3))
    ]
    placed.sort(key=lambda item: item[0])
    progress = Progress(len(placed), label)
    answers: dict[str, list[Answer]] = {request_id: [] for request_id, _send in requests}
    lock = threading.Lock()

    def one(request: tuple[str, Send]) -> None:
        answer = request[1]()
        with lock:
            answers[request[0]].append(answer)
        progress.advance()

    with ThreadPoolExecutor(max_workers=users) as pool:
        for future in [pool.submit(one, request) for _position, request in placed]:
            future.result()
    progress.close()
    return answers


def disagreements(answers: Mapping[str, list[Answer]]) -> list[str]:
    """Requests whose copies were answered differently."""
    found = []
    for request_id, got in sorted(answers.items()):
        differ = [answer for answer in got[1:] if answer != got[0]]
        if differ:
            found.append(f"request {request_id!r} answered {got[0]} and {differ[0]}")
    return found


def settle(
    answers: dict[str, list[Answer]],
    sends: Mapping[str, Send],
    status: Callable[[str], Answer],
    *,
    done: int,
    wait: float,
    what: str,
    patience: float = 3.0,
    aborted: Callable[[Mapping[str, Any]], Answer] | None = None,
) -> list[str]:
    """Wait for the workers to finish every request answered ``202``; the ones that never did.

    Each ``202`` in ``answers`` is then replaced by the final answer (status
    ``done``, the result), so the copies of a request compare as a client
    that polled would see them. A request that aborted after its checkpoint
    is a problem, unless the sample expects that: then ``aborted(status
    body)`` is its final answer. Like a patient client, it sends a request
    that still shows ``running`` after ``patience`` seconds again (same key,
    ``sends``): a completion record lost with a killed worker is then
    written by the replay.
    """
    left = {key: sends[key] for key, got in answers.items() if any(a.status == 202 for a in got)}
    deadline, resend_at = time.monotonic() + wait, time.monotonic() + patience
    problems: list[str] = []
    while left and time.monotonic() < deadline:
        for key in list(left):
            found = status(key).body
            if found.get("status") == "completed":
                final = Answer(done, found["result"])
                answers[key] = [final if answer.status == 202 else answer for answer in answers[key]]
                del left[key]
            elif found.get("status") == "aborted":
                if aborted is None:
                    problems.append(f"{what} {key!r} was answered as accepted but aborted: {found}")
                else:
                    final = aborted(found)
                    answers[key] = [final if answer.status == 202 else answer for answer in answers[key]]
                del left[key]
        if left and time.monotonic() >= resend_at:
            for send in left.values():
                send()
            resend_at = time.monotonic() + patience
        elif left:
            time.sleep(0.1)
    return problems + [f"{what} {key!r} not finished after {wait} s (are workers running?)" for key in left]


# -- processes --------------------------------------------------------------------------------------


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


# -- a demo: API servers and workers on one store and queue, killed under load --------------------------


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


# -- the command line ----------------------------------------------------------------------------------


Option = tuple[str, type[int] | type[float], int | float, str]
"""A size option of a command: ``(flag, type, default, what it is)``."""


def command_parser(sample: Sample[Any]) -> argparse.ArgumentParser:
    """The parser of ``python -m samples.<sample> serve|load|check|demo``."""
    name, helps = sample.name, sample.help
    parser = argparse.ArgumentParser(prog=f"python -m samples.{name}", description=f"The {name} sample.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_ = commands.add_parser("serve", help="run the HTTP API")
    serve_.add_argument("--store", required=True, help=f"store URL, e.g. sqlite:{name}.db")
    serve_.add_argument("--queue", help=helps["queue"])
    serve_.add_argument("--host", default="127.0.0.1")
    serve_.add_argument("--port", type=int, default=8000)
    load = commands.add_parser("load", help=helps["load"])
    load.add_argument("--url", action="append", default=[], help="API server URL (repeatable)")
    load.add_argument("--store", help="store URL: call the workflows directly instead of an API")
    load.add_argument("--queue", help="with --store: submit to this queue (workers must be running)")
    load.add_argument("--users", type=int, default=8, help="concurrent users (default 8)")
    load.add_argument("--seed", type=int, default=0, help="the same seed sends the same requests again")
    load.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the workers (queue)")
    check = commands.add_parser("check", help=helps["check"])
    check.add_argument("--store", required=True)
    for flag, kind, default, what in sample.check_options:
        check.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    demo = commands.add_parser("demo", help=helps["demo"])
    demo.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite files")
    demo.add_argument("--kills", type=int, default=6, help="processes to SIGKILL (default 6)")
    demo.add_argument("--workers", type=int, default=2, help="`idemflow worker` processes (default 2)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    for command, options in ((load, sample.load_sizes), (demo, sample.demo_sizes)):
        for flag, kind, default, what in options:
            command.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    return parser


def demo_seed(args: argparse.Namespace) -> int:
    return int(args.seed) if args.seed is not None else secrets.randbelow(1_000_000)


ApiT = TypeVar("ApiT")


@dataclass(frozen=True)
class Sample(Generic[ApiT]):
    """A sample's side of the command line: its API, its commands, their help and sizes."""

    name: str
    tables: Sequence[str]
    app: Callable[[str | Store | AsyncStore, str | Queue | AsyncQueue | None], Any]
    """The ASGI app of the sample's API over a store (asynchronous with a queue); URLs are opened
    in its lifespan, an asynchronous store with ``open_async_store``."""
    service: Callable[[str, str | None], Service]
    """The sample's service over a store URL (and queue URL, if any)."""
    check: Callable[..., Verdict]
    """``check(store, **options)``: the tables' verdict, given the values of :attr:`check_options`
    (by their flag's name: ``--late`` is ``late=``)."""
    http: Callable[[HttpClient], ApiT]
    """What the load calls, over HTTP ..."""
    direct: Callable[[Direct[Any]], ApiT]
    """... or the service's methods without HTTP (submitting to the queue, if any)."""
    load: Callable[[argparse.Namespace, ApiT], LoadReport[Any]]
    demo: Callable[[argparse.Namespace], int]
    help: Mapping[str, str]
    """The help of ``serve --queue``, ``load``, ``check`` and ``demo``."""
    load_sizes: Sequence[Option] = ()
    demo_sizes: Sequence[Option] = ()
    check_options: Sequence[Option] = ()

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run one command; the exit status is 0 when everything checked out, 1 if not, 2 on an error."""
        args = command_parser(self).parse_args(argv)
        try:
            return self._command(args)
        except (IdemflowError, httpx.TransportError) as exc:  # a bad URL, an unreachable server or store
            print(f"python -m samples.{self.name}: error: {exc}", file=sys.stderr)
            return 2

    def _command(self, args: argparse.Namespace) -> int:
        name = self.name
        if args.command == "serve":
            open_with(args.store, self.tables).close()  # the tables; the app opens an asynchronous store
            serve(self.app(args.store, args.queue), args.host, args.port)
            return 0
        if args.command == "check":
            options = [flag[2:].replace("-", "_") for flag, *_rest in self.check_options]
            verdict = self.check(
                open_with(args.store, self.tables), **{option: getattr(args, option) for option in options}
            )
            print("\n".join([f"idemflow {name} check", *verdict.lines(), "PASS" if verdict.ok else "FAIL"]))
            return 0 if verdict.ok else 1
        if args.command == "demo":
            return self.demo(args)
        if args.url:
            report = self.load(args, self.http(HttpClient(args.url)))
        elif args.store:
            open_with(args.store, self.tables).close()
            with Direct(self.service(args.store, args.queue)) as call:
                report = self.load(args, self.direct(call))
        else:
            print("load needs --url (an API server) or --store (direct calls)", file=sys.stderr)
            return 2
        problems = [f"  - {problem}" for problem in report.problems[:20]]
        print("\n".join([f"idemflow {name} load", *report.lines(), *problems]))
        return 0 if not report.problems else 1


__all__ = [
    "DEMO_VISIBILITY_TIMEOUT",
    "ROOT",
    "Child",
    "Crashes",
    "DemoReport",
    "Fleet",
    "FleetSettings",
    "HttpClient",
    "Killer",
    "Kills",
    "LoadReport",
    "Option",
    "Progress",
    "Sample",
    "Send",
    "Verdict",
    "command_parser",
    "demo_seed",
    "disagreements",
    "free_port",
    "open_with",
    "run_demo",
    "send_all",
    "settle",
]
