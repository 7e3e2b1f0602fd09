"""``idemflow console``: its options, checked into the console's settings, and the server run
over the store until interrupted.

The console is a host of its own (:mod:`idemflow.console`); what the command line adds is its
options and their checks, kept here so :mod:`idemflow.cli` only wires commands.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from idemflow.cli.loading import load_callable, load_workflows
from idemflow.console._server import serve
from idemflow.console._settings import ConsoleSettings, parse_basic_auth, redact_secrets
from idemflow.stores import Store
from idemflow.worker import open_queue


def add_console_parser(commands: Any) -> None:
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


def run_console_command(args: argparse.Namespace, store: Store) -> int:
    """Serve the console over ``store`` (and ``--queue``) until interrupted."""
    settings = ConsoleSettings(
        host=args.host,
        port=args.port,
        read_only=args.read_only,
        token=args.token or os.environ.get("IDEMFLOW_CONSOLE_TOKEN") or None,
        basic_auth=None if args.basic_auth is None else parse_basic_auth(args.basic_auth),
        redact=redact_secrets if args.redact is None else load_callable(args.redact),
        store_url=args.store,
        queue_url=args.queue,
    ).check()
    flows = [flow for spec in args.workflows for flow in load_workflows(spec)]
    queue = None
    if args.queue is not None:
        queue = open_queue(args.queue, create=False)  # the workers' queue: never a new one
    try:
        serve(settings, store, queue, flows, ready=lambda url: print(f"console: {url}", flush=True))
    finally:
        if queue is not None:
            queue.close()
    return 0
