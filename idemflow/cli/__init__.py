"""The ``idemflow`` command: provision tables, collect garbage, inspect requests.

    idemflow tables create --store URL NAME...
    idemflow gc --store URL [--older-than 7d] [--stats] [--vacuum]
    idemflow status --store URL WORKFLOW REQUEST_ID
    idemflow runs list --store URL [--workflow W] [--status S] [--older-than D] [--limit N]
        [--after CURSOR] [--json]
    idemflow runs show --store URL --workflows MODULE:ATTR WORKFLOW REQUEST_ID [--json]
    idemflow retry --store URL --queue URL WORKFLOW REQUEST_ID
    idemflow cancel --store URL WORKFLOW REQUEST_ID [--reason R]
    idemflow resume --store URL --queue URL WORKFLOW REQUEST_ID
    idemflow abort --store URL --workflows MODULE:ATTR WORKFLOW REQUEST_ID --reason R
    idemflow dead-letters list|redrive --queue URL [--id ID ...]
    idemflow worker MODULE:ATTR [MODULE:ATTR...] --store URL --queue URL --concurrency N [--asyncio]
        [--retention SECONDS] [--processes MIN:MAX [--scale-... N] [--scaling MODULE:ATTR] [--stop-grace S]]
    idemflow queue stats --queue URL [--json]
    idemflow console --store URL [--queue URL] [--workflows MODULE:ATTR ...] [--host H] --port P
        [--read-only] [--token T | --basic-auth USER:PASS] [--redact MODULE:ATTR]

Store URLs are those of :func:`idemflow.open_store`. Errors print one
line naming what to fix (never a connection string) and exit with status 2.
Output cut short by its reader (``idemflow runs list | head -1``) ends quietly, with status 141.
``worker`` imports MODULE with the current directory first on ``sys.path``,
as ``python -m`` does, so a project's workflows need not be installed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from idemflow.admin import abort_request, cancel, collect, dead_letters, expired_stats, redrive, retry, runs
from idemflow.cli import pool as _pool_cli
from idemflow.client import status
from idemflow.console._server import serve
from idemflow.console._settings import ConsoleSettings, parse_basic_auth, redact_secrets
from idemflow.core.policy import RetryPolicy
from idemflow.core.step_retry import StepRetry
from idemflow.errors import IdemflowError, InvalidInputError
from idemflow.keys import check_duration, check_table
from idemflow.operator.collection import parse_duration
from idemflow.operator.commands import ABORT_WAIT
from idemflow.operator.timeline import show
from idemflow.records import RunStatus
from idemflow.running.runner import Workflow
from idemflow.stores import Store
from idemflow.stores._opening import open_async_store, open_store
from idemflow.stores.base import Shrinking
from idemflow.worker import AsyncWorker, Worker, open_async_queue, open_queue

if TYPE_CHECKING:
    from idemflow.worker import WorkerStats


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="idemflow", description="Exactly-once workflows: operator tools.")
    commands = parser.add_subparsers(dest="command", required=True)

    tables = commands.add_parser("tables", help="provision tables")
    table_commands = tables.add_subparsers(dest="action", required=True)
    create = table_commands.add_parser("create", help="create tables (and the run-record table)")
    create.add_argument("--store", required=True, help="store URL, e.g. dynamodb:?region=eu-west-1")
    create.add_argument("names", nargs="+", help="logical table names")

    gc = commands.add_parser("gc", help="delete bookkeeping rows of requests finished long ago")
    gc.add_argument("--store", required=True)
    gc.add_argument("--older-than", help="collect requests finished this long ago, e.g. 7d, 12h, 30m, 3600s")
    gc.add_argument("--stats", action="store_true", help="count expired rows still present, by kind (JSON)")
    gc.add_argument("--vacuum", action="store_true", help="SQLite: rewrite the file, giving free space back")

    status = commands.add_parser("status", help="where a request stands")
    status.add_argument("--store", required=True)
    status.add_argument("workflow")
    status.add_argument("request_id")
    runs = commands.add_parser("runs", help="list requests")
    runs_commands = runs.add_subparsers(dest="action", required=True)
    listing = runs_commands.add_parser(
        "list", help="requests by workflow, status and age, a page at a time (SQLite: newest first)"
    )
    listing.add_argument("--store", required=True)
    listing.add_argument("--workflow")
    listing.add_argument(
        "--status", choices=[status.value for status in RunStatus if status.value != "pending"]
    )
    listing.add_argument("--older-than", help="started at least this long ago, e.g. 1h")
    listing.add_argument("--limit", type=int, help="at most this many (a page; the next one with --after)")
    listing.add_argument("--after", metavar="CURSOR", help="the page after the one that printed CURSOR")
    listing.add_argument(
        "--json",
        action="store_true",
        help='one JSON object per line; then {"next": CURSOR} if another page follows',
    )
    showing = runs_commands.add_parser("show", help="a request's steps, what it is at and waits for")
    showing.add_argument("--store", required=True)
    showing.add_argument("--workflows", required=True, action="append", help="MODULE:ATTR, as for worker")
    showing.add_argument("--json", action="store_true", help="one JSON object")
    showing.add_argument("workflow")
    showing.add_argument("request_id")

    retry = commands.add_parser("retry", help="hand a failed or stuck submitted request back to the workers")
    retry.add_argument("--store", required=True)
    retry.add_argument("--queue", required=True)
    retry.add_argument("workflow")
    retry.add_argument("request_id")

    resume = commands.add_parser("resume", help="hand a cancelled request back to the workers (as retry)")
    resume.add_argument("--store", required=True)
    resume.add_argument("--queue", required=True)
    resume.add_argument("workflow")
    resume.add_argument("request_id")

    cancel = commands.add_parser("cancel", help="stop a submitted request at its next step, undoing nothing")
    cancel.add_argument("--store", required=True)
    cancel.add_argument("--reason", default="cancelled by an operator")
    cancel.add_argument("workflow")
    cancel.add_argument("request_id")

    abort = commands.add_parser("abort", help="compensate an unfinished request and end it aborted")
    abort.add_argument("--store", required=True)
    abort.add_argument("--workflows", required=True, action="append", help="MODULE:ATTR, as for worker")
    abort.add_argument("--reason", required=True)
    abort.add_argument(
        "--wait",
        type=float,
        default=ABORT_WAIT,
        help=f"seconds to retry a failing compensation here (default {ABORT_WAIT:g}); then the "
        "request ends failed naming it and `idemflow retry` hands the undo to workers",
    )
    abort.add_argument("workflow")
    abort.add_argument("request_id")

    dead = commands.add_parser(
        "dead-letters", help="messages no worker could read (malformed, forged, unknown)"
    )
    dead.add_argument("action", choices=["list", "redrive"])
    dead.add_argument("--queue", required=True)
    dead.add_argument("--id", action="append", dest="ids", help="only these dead letters (repeatable)")
    dead.add_argument("--limit", type=int, help="list at most this many")

    worker = commands.add_parser("worker", help="finish checkpointed workflows from a queue")
    worker.add_argument(
        "workflows",
        nargs="+",
        help="MODULE:ATTR naming an iterable of @workflow functions (MODULE may be in the current "
        "directory); several may be given, e.g. the old and new versions during a deploy",
    )
    worker.add_argument("--store", required=True)
    worker.add_argument(
        "--queue",
        required=True,
        help="queue URL, e.g. sqs:jobs?region=eu-west-1 (&lanes=true: priority lanes)",
    )
    worker.add_argument("--concurrency", type=int, default=1, help="threads, or tasks with --asyncio")
    worker.add_argument(
        "--asyncio",
        action="store_true",
        help="run on an event loop: the stores' and queues' asynchronous clients, concurrency as tasks",
    )
    worker.add_argument("--idle-timeout", type=float, default=None, help="exit after this many idle seconds")
    worker.add_argument(
        "--log-steps",
        action="store_true",
        help="also log every run and step the engine executes (DEBUG events of the idemflow.engine logger)",
    )
    worker.add_argument(
        "--max-deliveries",
        type=int,
        default=5,
        help="deliveries of a message no worker here can run before its request fails (poison messages)",
    )
    worker.add_argument(
        "--retry-for",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a step that raises is retried when neither it nor its workflow names a policy "
        "(default: a day, at most every 5 minutes)",
    )
    worker.add_argument(
        "--version-wait",
        type=float,
        default=30.0,
        help="seconds before a request this worker cannot run returns",
    )
    worker.add_argument("--relay-every", type=float, default=10.0, help="seconds between outbox relay passes")
    worker.add_argument(
        "--retention",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long rows are kept for requests that carry no retention of their own (children, "
        "requests submitted before 1.0); others keep the one submit stored (default: 7 days)",
    )
    _console_parser(commands)
    _pool_cli.add_pool_options(worker)
    _pool_cli.add_queue_parser(commands)
    return parser


def _console_parser(commands: Any) -> None:
    """``idemflow console``: the operations console in the browser (docs/console.md)."""
    console = commands.add_parser("console", help="serve the operations console (a web page) over a store")
    console.add_argument("--store", required=True)
    console.add_argument("--queue", help="queue URL: retry, resume and dead letters need it")
    console.add_argument(
        "--workflows", action="append", default=[], help="MODULE:ATTR, as for worker: timelines and abort"
    )
    console.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1; any other needs auth")
    console.add_argument("--port", type=int, required=True, help="0 picks a free port (printed)")
    console.add_argument("--read-only", action="store_true", help="show only: no retry, cancel or abort")
    console.add_argument("--token", help="a bearer token (16+ characters); IDEMFLOW_CONSOLE_TOKEN too")
    console.add_argument("--basic-auth", metavar="USER:PASS", help="HTTP basic authentication instead")
    console.add_argument(
        "--redact", metavar="MODULE:ATTR", help="a function(JSON) -> JSON applied to inputs, results, steps"
    )


def _console(args: argparse.Namespace, store: Store) -> int:

    settings = ConsoleSettings(
        host=args.host,
        port=args.port,
        read_only=args.read_only,
        token=args.token or os.environ.get("IDEMFLOW_CONSOLE_TOKEN") or None,
        basic_auth=None if args.basic_auth is None else parse_basic_auth(args.basic_auth),
        redact=redact_secrets if args.redact is None else _load_callable(args.redact),
        store_url=args.store,
        queue_url=args.queue,
    ).check()
    flows = [flow for spec in args.workflows for flow in _load_workflows(spec)]
    queue = None
    if args.queue is not None:
        queue = open_queue(args.queue, create=False)  # the workers' queue: never a new one
    try:
        serve(settings, store, queue, flows, ready=lambda url: print(f"console: {url}", flush=True))
    finally:
        if queue is not None:
            queue.close()
    return 0


def _load_callable(spec: str) -> Any:
    """MODULE:ATTR naming a function (``--redact``)."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name) if module_name and attr else None
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise InvalidInputError(f"--redact needs MODULE:ATTR naming a function, not {spec!r}")
    return target


BROKEN_PIPE_STATUS = 141
"""What a command ends with when its reader went away (``idemflow runs list | head -1``): 128 +
SIGPIPE, the status a shell shows for a command a closed pipe ended."""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)  # its --help prints too
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.command == "dead-letters":
            code = _guarded(lambda: _dead_letters(args))
        elif args.command == "queue":
            code = _guarded(lambda: _pool_cli.queue_command(args))
        else:
            code = _guarded(lambda: _with_store(args))
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's flush at exit
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_STATUS
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter flushes it once more at exit, and what is still
    buffered for a closed pipe would fail again there, with a message on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _guarded(command: Callable[[], int]) -> int:
    try:
        return command()
    except IdemflowError as exc:
        print(f"idemflow: error: {exc}", file=sys.stderr)
        return 2


def _with_store(args: argparse.Namespace) -> int:
    store = open_store(args.store, create=args.command in ("tables", "worker"))
    try:
        return _dispatch(args, store)
    finally:
        store.close()


def _dead_letters(args: argparse.Namespace) -> int:

    queue = open_queue(args.queue, create=False)  # a mistyped path is an error, not an empty queue
    try:
        if args.action == "redrive":
            moved = redrive(queue, args.ids)
            print(f"redrove {moved} dead letter(s) onto the queue")
            return 0
        wanted = None if args.ids is None else set(args.ids)
        for letter in dead_letters(queue, limit=args.limit):
            if wanted is None or letter.id in wanted:
                print(
                    json.dumps(
                        {
                            "id": letter.id,
                            "dead_at": letter.dead_at,
                            "reason": letter.reason,
                            "body": letter.body[:500],
                        }
                    )
                )
    finally:
        queue.close()
    return 0


def _dispatch(args: argparse.Namespace, store: Store) -> int:
    if args.command == "tables":
        names = [check_table(name) for name in args.names]
        store.create_tables(*names)
        print(f"created (or found) tables: {', '.join(names)} and the run-record table")
        return 0
    if args.command == "worker":
        return _worker(args, store)
    if args.command == "console":
        return _console(args, store)
    if args.command == "gc":
        return _gc(args, store)
    if args.command == "runs":
        return _runs(args, store)
    if args.command in ("retry", "resume"):
        return _retry(args, store)
    if args.command == "cancel":
        was = cancel(store, args.workflow, args.request_id, reason=args.reason)
        stopped = not was.final and was is not RunStatus.CANCELLED
        print(json.dumps({"request_id": args.request_id, "was": was.value, "cancelled": stopped}))
        return 0
    if args.command == "abort":
        flows = [flow for spec in args.workflows for flow in _load_workflows(spec)]
        ended = abort_request(
            store, flows, args.workflow, args.request_id, reason=args.reason, wait=args.wait
        )
        print(json.dumps({"status": ended.status.value, "reason": ended.reason, "result": ended.result}))
        return 0
    record = status(store, args.workflow, args.request_id)
    if record.status is RunStatus.UNKNOWN:
        print(json.dumps({"status": RunStatus.UNKNOWN.value}))
    else:
        shown = {
            "status": record.status.value,
            "version": record.version,
            "result": record.result,
            "reason": record.reason,
            "failure": None if record.failure is None else record.failure.to_json(),
            "waiting": record.waiting,
        }
        print(json.dumps({key: value for key, value in shown.items() if value is not None}))
    return 0


def _gc(args: argparse.Namespace, store: Store) -> int:
    """Collect (``--older-than``), then vacuum (``--vacuum``), then count (``--stats``)."""
    if args.older_than is None and not (args.stats or args.vacuum):
        raise InvalidInputError("gc needs --older-than DURATION, --stats or --vacuum")
    older_than = None if args.older_than is None else parse_duration(args.older_than)
    if args.vacuum and not isinstance(store, Shrinking):
        raise InvalidInputError(f"gc --vacuum: {type(store).__name__} has no file to vacuum (SQLite has)")
    if older_than is not None:
        report = collect(store, older_than=older_than)
        print(
            f"collected {report.requests} finished requests: {report.memo_rows} memo rows, "
            f"{report.run_records} run records; {report.pages_released} free pages given back"
        )
    if args.vacuum:
        assert isinstance(store, Shrinking)
        before, after = store.vacuum()
        print(f"vacuumed: {before:,} bytes before, {after:,} after")
    if args.stats:
        print(json.dumps(expired_stats(store).to_json()))
    return 0


def _runs(args: argparse.Namespace, store: Store) -> int:
    if args.action == "show":
        return _show(args, store)
    older = None if args.older_than is None else parse_duration(args.older_than)
    wanted = None if args.status is None else RunStatus(args.status)
    page = runs(
        store, workflow=args.workflow, status=wanted, older_than=older, limit=args.limit, after=args.after
    )
    for summary in page.runs:
        if args.json:
            print(json.dumps(summary.to_json()))
            continue
        started = summary.age_from()
        when = "-" if started is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started))
        note = summary.record.waiting or (summary.record.failure.reason if summary.record.failure else "")
        print(
            f"{when}  {summary.status.value:9}  {summary.workflow} v{summary.record.version}  "
            f"{summary.request_id}  {note}".rstrip()
        )
    if args.json:
        if page.next is not None:
            print(json.dumps({"next": page.next}))
        return 0
    more = "" if page.next is None else f"; next page: --after {page.next}"
    print(f"{len(page.runs)} request(s), {page.order}{more}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace, store: Store) -> int:

    flows = [flow for spec in args.workflows for flow in _load_workflows(spec)]
    view = show(store, flows, args.workflow, args.request_id)
    if args.json:
        print(json.dumps(view.to_json()))
        return 0
    print("\n".join(view.lines()))
    return 0


def _retry(args: argparse.Namespace, store: Store) -> int:

    queue = open_queue(args.queue, create=False)  # resubmitted where workers read, not to a new queue
    try:
        before = retry(store, queue, args.workflow, args.request_id)
    finally:
        queue.close()
    done = before.final
    print(json.dumps({"request_id": args.request_id, "was": before.value, "resubmitted": not done}))
    return 0


def _load_workflows(spec: str) -> list[Any]:
    """``--workflows``: one workflow or a list of them (a stranger's first try names one)."""
    target = _load_object(spec, "one workflow or a list of them")
    if isinstance(target, Workflow):
        return [target]
    try:
        found = list(target)
    except TypeError:
        found = [target]
    strangers = [item for item in found if not isinstance(item, Workflow)]
    if strangers:
        raise InvalidInputError(f"{spec} holds {strangers[0]!r}, not a @workflow")
    return found


def _load_object(spec: str, what: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInputError(f"{spec!r} must be MODULE:ATTR naming {what}")
    # As `python -m` does: the project in the current directory is importable without installing it.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidInputError(f"{module_name!r} has no attribute {attr!r}")
    return target


def _worker(args: argparse.Namespace, store: Store) -> int:

    if args.processes is not None:
        load = lambda spec: _load_object(spec, "workflows or a policy")  # noqa: E731
        return _pool_cli.run_pool(args, args.argv, load, _parser().parse_args)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for sdk in ("azure", "botocore", "boto3", "urllib3"):  # their INFO is one line per HTTP call
        logging.getLogger(sdk).setLevel(logging.WARNING)
    if args.log_steps:
        logging.getLogger("idemflow.engine").setLevel(logging.DEBUG)
    workflows = [flow for spec in args.workflows for flow in _load_workflows(spec)]
    options: dict[str, Any] = {
        "concurrency": args.concurrency,
        "max_deliveries": args.max_deliveries,
        "version_wait": args.version_wait,
        "step_retry": None if args.retry_for is None else StepRetry(expiry=args.retry_for),
        "relay_every": args.relay_every,
    }
    if args.retention is not None:
        options["policy"] = RetryPolicy(retention=check_duration(args.retention, "--retention"))

    def progress(stats: WorkerStats) -> None:
        elapsed = max(time.monotonic() - stats.started, 1e-9)
        print(
            f"{stats.finished} finished ({stats.finished / elapsed:.1f}/s), {stats.aborted} aborted, "
            f"{stats.retried} retried, {stats.dead_lettered} dead-lettered",
            file=sys.stderr,
            flush=True,
        )

    if args.asyncio:
        stats = asyncio.run(_async_worker(args, workflows, options, progress))
    else:
        queue = open_queue(args.queue)
        try:
            worker = Worker(workflows, store=store, queue=queue, **options)
            stats = worker.run(idle_timeout=args.idle_timeout, on_progress=progress)
        finally:
            queue.close()
    progress(stats)
    return 0


async def _async_worker(
    args: argparse.Namespace,
    workflows: list[Workflow[Any, Any]],
    options: dict[str, Any],
    progress: Callable[[WorkerStats], None],
) -> WorkerStats:
    """``idemflow worker --asyncio``: the store and queue on their asynchronous clients."""

    store = open_async_store(args.store)
    queue = open_async_queue(args.queue)
    try:
        worker = AsyncWorker(workflows, store=store, queue=queue, **options)
        return await worker.run(idle_timeout=args.idle_timeout, on_progress=progress)
    finally:
        await queue.close()
        await store.close()
