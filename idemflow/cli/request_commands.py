"""The commands on one request or a listing of them: ``status``, ``runs list``, ``runs show``,
``runs fork``, ``retry``, ``resume``, ``cancel`` and ``abort``, their options and what they print.

What an operator does to requests is one group of the command line with one shape (a store, a
workflow, a request id, a JSON line out), so its options and its output live together here;
:mod:`idemflow.cli` only wires the groups.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from idemflow.admin import abort_request, cancel, fork, retry, runs
from idemflow.cli.loading import load_workflows
from idemflow.client import status
from idemflow.core.tags import parse_tag, tag_filter
from idemflow.errors import InvalidInputError
from idemflow.operator.collection import parse_duration
from idemflow.operator.commands import ABORT_WAIT
from idemflow.operator.timeline import show
from idemflow.records import RunStatus
from idemflow.stores import Store
from idemflow.worker import open_queue

COMMANDS = ("status", "runs", "retry", "resume", "cancel", "abort")
"""The commands this module parses and runs."""


def add_request_parsers(commands: Any) -> None:
    """The parsers of :data:`COMMANDS`, in the order ``idemflow --help`` lists them."""
    status = commands.add_parser("status", help="where a request stands")
    status.add_argument("--store", required=True)
    status.add_argument("workflow")
    status.add_argument("request_id")
    runs = commands.add_parser("runs", help="list requests")
    runs_commands = runs.add_subparsers(dest="action", required=True)
    listing = runs_commands.add_parser(
        "list", help="requests by workflow, status, age and tags, a page at a time (SQLite: newest first)"
    )
    listing.add_argument("--store", required=True)
    listing.add_argument("--workflow")
    listing.add_argument(
        "--status", choices=[status.value for status in RunStatus if status.value != "pending"]
    )
    listing.add_argument("--older-than", help="started at least this long ago, e.g. 1h")
    listing.add_argument(
        "--tag",
        action="append",
        type=_tag,
        default=[],
        metavar="KEY=VALUE",
        help="carrying this tag (submit(tags=)); repeat it for requests carrying every one",
    )
    listing.add_argument("--limit", type=int, help="at most this many (a page; the next one with --after)")
    listing.add_argument("--after", metavar="CURSOR", help="the page after the one that printed CURSOR")
    listing.add_argument(
        "--json",
        action="store_true",
        help='one JSON object per line; then {"next": CURSOR} if another page follows',
    )
    showing = runs_commands.add_parser("show", help="a request's steps, what it is at and waits for")
    showing.add_argument("--store", required=True)
    showing.add_argument(
        "--workflows",
        action="append",
        default=[],
        help="MODULE:ATTR, as for worker: replays a running request (else its steps are read from the store)",
    )
    showing.add_argument("--json", action="store_true", help="one JSON object")
    showing.add_argument("workflow")
    showing.add_argument("request_id")
    forking = runs_commands.add_parser(
        "fork", help="a new request keeping a request's steps before --from-step, the rest run anew"
    )
    forking.add_argument("--store", required=True)
    forking.add_argument("--queue", required=True)
    forking.add_argument("--workflows", required=True, action="append", help="MODULE:ATTR, as for worker")
    forking.add_argument("--from-step", required=True, type=int, help="the first step run anew (from 1)")
    forking.add_argument("--new-id", help="the new request's id (default: the old one's with a suffix)")
    forking.add_argument(
        "--input",
        type=_input,
        help='a finished request\'s input, given again: {"args": [...], "kwargs": {...}} or a list of args',
    )
    forking.add_argument("workflow")
    forking.add_argument("request_id")

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
    cancel.add_argument(
        "--children", action="store_true", help="also cancel the requests it started, depth first"
    )
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


def run_request_command(args: argparse.Namespace, store: Store) -> int:
    """Run one of :data:`COMMANDS` on ``store`` and print its answer."""
    if args.command == "runs":
        return _runs(args, store)
    if args.command in ("retry", "resume"):
        return _retry(args, store)
    if args.command == "cancel":
        was = cancel(store, args.workflow, args.request_id, reason=args.reason, children=args.children)
        stopped = not was.final and was not in (RunStatus.CANCELLED, RunStatus.UNKNOWN)
        answer = {"request_id": args.request_id, "was": was.value, "cancelled": stopped}
        print(json.dumps({**answer, "children": True} if args.children else answer))
        return 0
    if args.command == "abort":
        flows = [flow for spec in args.workflows for flow in load_workflows(spec)]
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


def _runs(args: argparse.Namespace, store: Store) -> int:
    if args.action == "show":
        return _show(args, store)
    if args.action == "fork":
        return _fork(args, store)
    older = None if args.older_than is None else parse_duration(args.older_than)
    wanted = None if args.status is None else RunStatus(args.status)
    page = runs(
        store,
        workflow=args.workflow,
        status=wanted,
        older_than=older,
        limit=args.limit,
        after=args.after,
        tags=dict(tag_filter(args.tag)),  # one key given twice is refused, not overwritten
    )
    for summary in page.runs:
        if args.json:
            print(json.dumps(summary.to_json()))
            continue
        started = summary.age_from()
        when = "-" if started is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started))
        note = summary.record.waiting or (summary.record.failure.reason if summary.record.failure else "")
        tags = " ".join(f"{key}={value}" for key, value in (summary.record.tags or {}).items())
        print(
            f"{when}  {summary.status.value:9}  {summary.workflow} v{summary.record.version}  "
            f"{summary.request_id}  {note}  {tags}".rstrip()
        )
    if args.json:
        if page.next is not None:
            print(json.dumps({"next": page.next}))
        return 0
    more = "" if page.next is None else f"; next page: --after {page.next}"
    print(f"{len(page.runs)} request(s), {page.order}{more}", file=sys.stderr)
    return 0


def _tag(text: str) -> tuple[str, str]:
    """``--tag KEY=VALUE`` as a pair; argparse says what is wrong with one that is not."""
    try:
        return parse_tag(text)
    except InvalidInputError as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None


def _show(args: argparse.Namespace, store: Store) -> int:

    flows = [flow for spec in args.workflows for flow in load_workflows(spec)]
    view = show(store, flows, args.workflow, args.request_id)
    if args.json:
        print(json.dumps(view.to_json()))
        return 0
    print("\n".join(view.lines()))
    return 0


def _input(text: str) -> tuple[list[Any], dict[str, Any]]:
    """``--input``: the arguments of a workflow call, as JSON."""
    try:
        given = json.loads(text)
    except ValueError as bad:
        raise argparse.ArgumentTypeError(f"--input is not JSON: {bad}") from None
    if isinstance(given, list):
        return given, {}
    if (
        isinstance(given, dict)
        and isinstance(given.get("args", []), list)
        and isinstance(given.get("kwargs", {}), dict)
    ):
        return list(given.get("args", [])), dict(given.get("kwargs", {}))
    raise argparse.ArgumentTypeError('--input is {"args": [...], "kwargs": {...}} or a JSON list of args')


def _fork(args: argparse.Namespace, store: Store) -> int:
    flows = [flow for spec in args.workflows for flow in load_workflows(spec)]
    queue = open_queue(args.queue, create=False)  # where workers read, not a new queue
    try:
        handle = fork(
            store,
            flows,
            args.workflow,
            args.request_id,
            from_step=args.from_step,
            new_request_id=args.new_id,
            queue=queue,
            input=args.input,
        )
    finally:
        queue.close()
    answer = {"request_id": handle.request_id, "forked_from": args.request_id, "from_step": args.from_step}
    print(json.dumps(answer))
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
