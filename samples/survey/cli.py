"""``python -m samples.survey serve|load|check|demo``: run the API, throw load at it, verify.

    python -m samples.survey serve --store sqlite:survey.db [--queue sqlite:queue.db] [--port 8000]
    python -m samples.survey load  --url http://127.0.0.1:8000     (or --store URL [--queue URL])
    python -m samples.survey check --store sqlite:survey.db
    python -m samples.survey demo                     # all of it, with SIGKILLed processes

``load`` simulates ``--users`` concurrent users (threads). Every request is
sent 2-4 times under the same request id — duplicate retries, some racing
each other — through the HTTP API (``--url``, repeatable: each retry goes
to the next server) or straight against the store (``--store``). It then
verifies what the clients saw: every copy of a request got the same answer,
and each survey counted exactly the responses its clients were told were
accepted. ``check`` verifies the tables alone and exits 1 on any violation.

The generic parts — :class:`Progress`, :class:`HttpClient`, :class:`Fleet`
(child processes to SIGKILL and restart), :class:`Killer` and
:func:`send_all` — are reused by the auction sample.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import httpx

from idemflow import IdemflowError, Store, open_store
from idemflow.async_worklist import open_queue
from samples.survey import workflows
from samples.survey.api import Answer, SurveyService, create_app, serve
from samples.transfer.demo import reset

ROOT = Path(__file__).resolve().parent.parent.parent
"""The directory holding the ``samples`` package: child processes need it on their path."""


# -- generic load tooling ---------------------------------------------------------------------


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


def disagreements(
    answers: Mapping[str, list[Answer]], normal: Callable[[Answer], object] = lambda answer: answer
) -> list[str]:
    """Requests whose copies were answered differently (compared after ``normal``)."""
    found = []
    for request_id, got in sorted(answers.items()):
        differ = [a for a in got[1:] if normal(a) != normal(got[0])]
        if differ:
            found.append(f"request {request_id!r} answered {got[0]} and {differ[0]}")
    return found


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
    """Child processes (``python ARGV``) that a crash test SIGKILLs and restarts."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")]))
        self.children: list[Child] = []
        self.kills: Counter[str] = Counter()

    def start(self, kind: str, argv: list[str], port: int | None = None) -> Child:
        child = Child(kind, argv, port)
        self.children.append(child)
        self._launch(child)
        return child

    def server(self, argv: list[str]) -> str:
        """Start ``argv --port P`` on a free port; its URL, once it answers ``/healthz``."""
        port = free_port()
        self.start("server", [*argv, "--port", str(port)], port)
        return f"http://127.0.0.1:{port}"

    def _launch(self, child: Child) -> None:
        if child.log is not None:
            child.log.close()
        child.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop() or the next launch
        child.process = subprocess.Popen(
            [sys.executable, *child.argv], env=self.env, stdout=child.log, stderr=subprocess.STDOUT
        )
        if child.port is not None:
            _wait_ready(child)

    def kill(self, child: Child) -> None:
        """SIGKILL ``child`` (no chance to clean up) and start it again."""
        assert child.process is not None
        child.process.send_signal(signal.SIGKILL)
        child.process.wait()
        self.kills[child.kind] += 1
        self._launch(child)

    def stop(self) -> None:
        """Ask every child to stop (SIGTERM: workers finish what they hold), then make sure."""
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
    while requests are in flight.
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
        while self.thresholds and not self._stop.wait(0.005):
            if progress() >= self.thresholds[0]:
                self.thresholds.pop(0)
                time.sleep(self.rng.uniform(0, 0.03))  # land anywhere inside a request
                kind = kinds[killed % len(kinds)]  # take turns: servers, then workers, ...
                self.fleet.kill(
                    self.rng.choice([child for child in self.fleet.children if child.kind == kind])
                )
                killed += 1


# -- the survey load ------------------------------------------------------------------------


class SurveyApi(Protocol):
    """What the load calls: :class:`~samples.survey.api.SurveyService` directly, or :class:`SurveyHttp`."""

    def create_survey(self, key: str | None, body: object) -> Answer: ...
    def respond(self, key: str | None, survey_id: str, body: object) -> Answer: ...
    def response_status(self, request_id: str) -> Answer: ...
    def results(self, survey_id: str) -> Answer: ...


class SurveyHttp:
    """:class:`SurveyApi` over HTTP."""

    def __init__(self, client: HttpClient) -> None:
        self.client = client

    def create_survey(self, key: str | None, body: object) -> Answer:
        return self.client.request("POST", "/surveys", key=key, body=body)

    def respond(self, key: str | None, survey_id: str, body: object) -> Answer:
        return self.client.request("POST", f"/surveys/{survey_id}/responses", key=key, body=body)

    def response_status(self, request_id: str) -> Answer:
        return self.client.request("GET", f"/responses/{request_id}")

    def results(self, survey_id: str) -> Answer:
        return self.client.request("GET", f"/surveys/{survey_id}/results")


COLOURS = ["red", "green", "blue", "yellow"]
SIZES = ["S", "M", "L"]


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Sizes of one load. Ids derive from ``seed``: re-running a load is one big duplicate."""

    users: int = 8
    responses: int = 200
    surveys: int = 3
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to count everything."""


@dataclass
class LoadReport:
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    settings: LoadSettings
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        s = self.settings
        refused = {code: n for code, n in sorted(self.outcomes.items()) if code != "counted"}
        detail = ", ".join(f"{n} {code}" for code, n in refused.items())
        return [
            f"  load      {s.responses} responses to {s.surveys} surveys sent {self.sent} times by "
            f"{s.users} users ({self.sent - s.responses} duplicates)",
            f"  outcome   {self.outcomes['counted']} counted, {sum(refused.values())} refused"
            + (f" ({detail})" if detail else ""),
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; each survey counts exactly the responses its clients saw accepted",
        ]


def survey_plan(settings: LoadSettings) -> list[workflows.Survey]:
    return [
        {
            "id": f"load{settings.seed}-s{n}",
            "title": f"Survey {n} of load {settings.seed}",
            "questions": [
                {"id": "colour", "text": "Favourite colour?", "options": COLOURS},
                {"id": "size", "text": "T-shirt size?", "options": SIZES},
            ],
        }
        for n in range(settings.surveys)
    ]


def response_plan(settings: LoadSettings, rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """``(request id, survey id, body)``; one in 15 picks a non-option, one in 12 repeats a respondent."""
    plan: list[tuple[str, str, dict[str, Any]]] = []
    for n in range(settings.responses):
        respondent = f"user{n}"
        if n % 12 == 5 and n >= settings.surveys:
            respondent = plan[n - settings.surveys][2]["respondent"]  # the same survey, answered twice
        answers = {"colour": rng.choice(COLOURS), "size": rng.choice(SIZES)}
        if n % 15 == 7:
            answers["colour"] = "purple"
        body = {"respondent": respondent, "answers": answers}
        plan.append((f"load{settings.seed}-r{n}", f"load{settings.seed}-s{n % settings.surveys}", body))
    return plan


def _normal(answer: Answer) -> object:
    # The asynchronous variant answers 202 until a worker finished, 200 after: both mean accepted.
    return "accepted" if answer.status in (200, 202) else (answer.status, answer.body)


def run_load(api: SurveyApi, settings: LoadSettings) -> LoadReport:
    """Create the surveys, send the responses with duplicates, verify what the clients saw.

    If any response was answered ``202`` (the asynchronous variant), it first
    waits up to ``settings.wait`` seconds for the workers to count them all.
    """
    rng = random.Random(settings.seed)
    report = LoadReport(settings)
    surveys = survey_plan(settings)
    created = send_all(
        [
            (f"create-{s['id']}", functools.partial(api.create_survey, f"create-{s['id']}", s))
            for s in surveys
        ],
        users=settings.users,
        rng=rng,
        label="surveys",
    )
    report.problems += [f"creating {key}: {got[0]}" for key, got in created.items() if got[0].status != 201]
    plan = response_plan(settings, rng)
    answers = send_all(
        [(key, functools.partial(api.respond, key, survey, body)) for key, survey, body in plan],
        users=settings.users,
        rng=rng,
        label="responses",
    )
    report.sent = sum(map(len, answers.values()))
    report.problems += disagreements(answers, _normal)
    accepted: Counter[str] = Counter()
    for key, target, _body in plan:
        first = answers[key][0]
        if first.status in (200, 202):
            accepted[target] += 1
            report.outcomes["counted"] += 1
        else:
            report.outcomes[str(first.body.get("error"))] += 1
    if any(got[0].status == 202 for got in answers.values()):
        sends = {key: functools.partial(api.respond, key, survey, body) for key, survey, body in plan}
        accepted_keys = [key for key, _survey, _body in plan if answers[key][0].status in (200, 202)]
        report.problems += _wait_counted(api, {key: sends[key] for key in accepted_keys}, settings.wait)
    for definition in surveys:
        survey = definition["id"]
        found = api.results(survey)
        counted = found.body.get("responses") if found.status == 200 else found
        if counted != accepted[survey]:
            report.problems.append(
                f"survey {survey!r}: clients saw {accepted[survey]} responses accepted, "
                f"the summary counts {counted}"
            )
    return report


def _wait_counted(
    api: SurveyApi, pending: Mapping[str, Send], wait: float, patience: float = 3.0
) -> list[str]:
    """Poll until the workers completed every accepted response; the ones that never did.

    Like a patient client, it sends a request that still shows ``running``
    after ``patience`` seconds again (same key): a completion record lost
    with a killed worker is then written by the replay.
    """
    deadline, left = time.monotonic() + wait, dict(pending)
    problems: list[str] = []
    resend_at = time.monotonic() + patience
    while left and time.monotonic() < deadline:
        for key in list(left):
            state = api.response_status(key).body.get("status")
            if state == "completed":
                del left[key]
            elif state == "aborted":
                problems.append(f"response {key!r} was answered as accepted but aborted")
                del left[key]
        if left and time.monotonic() >= resend_at:
            for send in left.values():
                send()
            resend_at = time.monotonic() + patience
        elif left:
            time.sleep(0.1)
    return problems + [f"response {key!r} not counted after {wait} s (are workers running?)" for key in left]


# -- the demo: load through API servers and workers that get SIGKILLed ---------------------------


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """One demo run; without ``store``/``queue`` URLs it uses fresh SQLite files in ``data``."""

    data: Path = Path("demo-data")
    store: str | None = None
    queue: str | None = None
    servers: int = 2
    workers: int = 2
    kills: int = 6
    load: LoadSettings = LoadSettings(responses=300)


@dataclass(frozen=True, slots=True)
class DemoReport:
    settings: DemoSettings
    store: str
    load: LoadReport
    verdict: workflows.Verdict
    kills: Mapping[str, int]
    retries: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.load.problems

    def render(self) -> str:
        s = self.settings
        lines = [
            f"idemflow survey demo: {self.store}, seed {s.load.seed}",
            f"  setup     {s.servers} API servers (asynchronous: answer at the checkpoint) and "
            f"{s.workers} `idemflow worker` processes counting the responses",
            *self.load.lines()[:2],
            f"  crashes   {sum(self.kills.values())} SIGKILLs ({self.kills.get('server', 0)} API servers, "
            f"{self.kills.get('worker', 0)} workers), each restarted; clients retried {self.retries} times",
            *self.load.lines()[2:],
            *self.verdict.lines(),
            *(f"  - {problem}" for problem in self.load.problems[:10]),
        ]
        verdict = "PASS" if self.ok else "FAIL"
        tail = "every response counted exactly once" if self.ok else "see the problems above"
        return "\n".join([*lines, f"{verdict} in {self.seconds:.1f} s: {tail}"])


def run_demo(settings: DemoSettings) -> DemoReport:
    """Servers and workers on one store and queue, SIGKILLed during a load; then ``check``."""
    started = time.monotonic()
    store_url, queue_url = settings.store, settings.queue
    if store_url is None:
        reset(settings.data / "survey.sqlite3")
        store_url = f"sqlite:{settings.data / 'survey.sqlite3'}"
    if queue_url is None:
        reset(settings.data / "survey-queue.sqlite3")
        queue_url = f"sqlite:{settings.data / 'survey-queue.sqlite3'}?visibility_timeout=2"
    store = _open(store_url)
    fleet = Fleet({"IDEMFLOW_SIGNING_KEY": secrets.token_hex(16)})
    try:
        urls = [
            fleet.server(["-m", "samples.survey", "serve", "--store", store_url, "--queue", queue_url])
            for _ in range(settings.servers)
        ]
        worker = ["-m", "idemflow.cli", "worker", "samples.survey.workflows:WORKFLOWS", "--concurrency", "2"]
        for _ in range(settings.workers):
            fleet.start("worker", [*worker, "--store", store_url, "--queue", queue_url])
        client = HttpClient(urls)
        rng = random.Random(settings.load.seed)
        killer = Killer(fleet, settings.kills, 2 * settings.load.responses, rng)
        with killer.watching(lambda: client.sent):
            report = run_load(SurveyHttp(client), settings.load)
    finally:
        fleet.stop()
    try:
        verdict = workflows.check(store)
    finally:
        store.close()
    shown = store_url if settings.store is None else store_url.split(":", 1)[0] + " store"
    return DemoReport(
        settings, shown, report, verdict, dict(fleet.kills), client.retries, time.monotonic() - started
    )


# -- commands -----------------------------------------------------------------------------------


def _open(url: str) -> Store:
    store = open_store(url)
    store.create_tables(*workflows.TABLES)
    return store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m samples.survey", description="The survey sample.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_ = commands.add_parser("serve", help="run the HTTP API")
    serve_.add_argument("--store", required=True, help="store URL, e.g. sqlite:survey.db")
    serve_.add_argument("--queue", help="queue URL: answer at the checkpoint, workers count (async variant)")
    serve_.add_argument("--host", default="127.0.0.1")
    serve_.add_argument("--port", type=int, default=8000)
    load = commands.add_parser("load", help="simulate concurrent users sending responses, with duplicates")
    load.add_argument("--url", action="append", default=[], help="API server URL (repeatable)")
    load.add_argument("--store", help="store URL: call the workflows directly instead of an API")
    load.add_argument("--queue", help="with --store: submit to this queue (workers must be running)")
    load.add_argument("--users", type=int, default=8, help="concurrent users (default 8)")
    load.add_argument("--responses", type=int, default=200, help="distinct responses (default 200)")
    load.add_argument("--surveys", type=int, default=3, help="surveys (default 3)")
    load.add_argument("--seed", type=int, default=0, help="the same seed sends the same requests again")
    load.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the workers (queue)")
    check_ = commands.add_parser("check", help="verify every response is counted once; exit 1 if not")
    check_.add_argument("--store", required=True)
    demo = commands.add_parser("demo", help="load with SIGKILLed servers and workers, then check (SQLite)")
    demo.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite files")
    demo.add_argument("--responses", type=int, default=300, help="distinct responses (default 300)")
    demo.add_argument("--kills", type=int, default=6, help="processes to SIGKILL (default 6)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit status is 0 when everything checked out, 1 if not, 2 on an error."""
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except (IdemflowError, httpx.TransportError) as exc:  # a bad URL, an unreachable server or store
        print(f"python -m samples.survey: error: {exc}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> int:
    if args.command == "serve":
        queue = open_queue(args.queue) if args.queue else None
        serve(create_app(SurveyService(_open(args.store), queue)), args.host, args.port)
        return 0
    if args.command == "check":
        verdict = workflows.check(_open(args.store))
        print("\n".join(["idemflow survey check", *verdict.lines(), "PASS" if verdict.ok else "FAIL"]))
        return 0 if verdict.ok else 1
    if args.command == "load":
        settings = LoadSettings(args.users, args.responses, args.surveys, args.seed, args.wait)
        api: SurveyApi
        if args.url:
            api = SurveyHttp(HttpClient(args.url))
        elif args.store:
            api = SurveyService(_open(args.store), open_queue(args.queue) if args.queue else None)
        else:
            print("load needs --url (an API server) or --store (direct calls)", file=sys.stderr)
            return 2
        report = run_load(api, settings)
        print(
            "\n".join(["idemflow survey load", *report.lines(), *(f"  - {p}" for p in report.problems[:20])])
        )
        return 0 if not report.problems else 1
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    load = LoadSettings(responses=args.responses, seed=seed)
    print(f"survey demo: {args.responses} responses with duplicates, {args.kills} SIGKILLs ...", flush=True)
    result = run_demo(DemoSettings(data=args.data, kills=args.kills, load=load))
    print(result.render())
    return 0 if result.ok else 1


__all__ = [
    "DemoReport",
    "DemoSettings",
    "Fleet",
    "HttpClient",
    "Killer",
    "LoadReport",
    "LoadSettings",
    "Progress",
    "SurveyApi",
    "SurveyHttp",
    "disagreements",
    "free_port",
    "main",
    "run_demo",
    "run_load",
    "send_all",
]
