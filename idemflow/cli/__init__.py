"""The ``idemflow`` command: provision tables, collect garbage, inspect requests.

    idemflow tables create --store URL NAME...
    idemflow gc --store URL [--older-than 7d] [--stats] [--vacuum]
    idemflow status --store URL WORKFLOW REQUEST_ID
    idemflow runs list --store URL [--workflow W] [--status S] [--older-than D] [--limit N]
        [--after CURSOR] [--json]
    idemflow runs show --store URL [--workflows MODULE:ATTR] WORKFLOW REQUEST_ID [--json]
    idemflow runs fork --store URL --queue URL --workflows MODULE:ATTR WORKFLOW REQUEST_ID
        --from-step N [--new-id ID] [--input JSON]
    idemflow check-deploy --store URL --workflows MODULE:ATTR [--workflow W] [--json]
    idemflow retry --store URL --queue URL WORKFLOW REQUEST_ID
    idemflow cancel --store URL WORKFLOW REQUEST_ID [--reason R] [--children]
    idemflow resume --store URL --queue URL WORKFLOW REQUEST_ID
    idemflow abort --store URL --workflows MODULE:ATTR WORKFLOW REQUEST_ID --reason R
    idemflow dead-letters list|redrive --queue URL [--id ID ...]
    idemflow worker MODULE:ATTR [MODULE:ATTR...] --store URL --queue URL --concurrency N [--asyncio]
        [--retention SECONDS] [--processes MIN:MAX [--scale-... N] [--scaling MODULE:ATTR] [--stop-grace S]]
        [--schedules MODULE:ATTR [--schedule-every SECONDS]]
    idemflow schedules list --store URL --schedules MODULE:ATTR [--json]
    idemflow schedules pause|resume --store URL NAME
    idemflow schedules trigger --store URL --queue URL --schedules MODULE:ATTR NAME [--at WHEN]
    idemflow queue stats --queue URL [--json]
    idemflow console --store URL [--queue URL] [--workflows MODULE:ATTR ...] [--host H] --port P
        [--read-only] [--token T | --basic-auth USER:PASS] [--redact MODULE:ATTR]

Store URLs are those of :func:`idemflow.open_store`. Errors print one
line naming what to fix (never a connection string) and exit with status 2.
Output cut short by its reader (``idemflow runs list | head -1``) ends quietly, with status 141.
``worker`` imports MODULE with the current directory first on ``sys.path``,
as ``python -m`` does, so a project's workflows need not be installed.

This module wires the commands and ends them as above; each group has its module in this
package, with its options and what it prints (``request_commands``, ``store_commands``,
``dead_letter_commands``, ``worker_command``, ``schedule_commands``, ``console_command``,
``deploy_command``, ``pool``), and ``loading`` imports the ``MODULE:ATTR`` they name.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from idemflow.cli import pool as _pool_cli
from idemflow.cli.console_command import add_console_parser, run_console_command
from idemflow.cli.dead_letter_commands import add_dead_letter_parser, run_dead_letter_command
from idemflow.cli.deploy_command import add_deploy_parser, run_deploy_command
from idemflow.cli.request_commands import add_request_parsers, run_request_command
from idemflow.cli.schedule_commands import add_schedule_parser, run_schedule_command
from idemflow.cli.store_commands import COMMANDS as STORE_COMMANDS
from idemflow.cli.store_commands import add_store_parsers, run_store_command
from idemflow.cli.worker_command import add_worker_parser, run_worker_command
from idemflow.errors import IdemflowError
from idemflow.stores import Store
from idemflow.stores._opening import open_store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="idemflow", description="Exactly-once workflows: operator tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_store_parsers(commands)
    add_request_parsers(commands)
    add_deploy_parser(commands)
    add_dead_letter_parser(commands)
    add_worker_parser(commands)
    add_schedule_parser(commands)
    add_console_parser(commands)
    _pool_cli.add_queue_parser(commands)
    return parser


BROKEN_PIPE_STATUS = 141
"""What a command ends with when its reader went away (``idemflow runs list | head -1``): 128 +
SIGPIPE, the status a shell shows for a command a closed pipe ended."""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)  # its --help prints too
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.command == "dead-letters":
            code = _guarded(lambda: run_dead_letter_command(args))
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


def _dispatch(args: argparse.Namespace, store: Store) -> int:
    if args.command in STORE_COMMANDS:
        return run_store_command(args, store)
    if args.command == "worker":
        return run_worker_command(args, store, _parser().parse_args)
    if args.command == "console":
        return run_console_command(args, store)
    if args.command == "check-deploy":
        return run_deploy_command(args, store)
    if args.command == "schedules":
        return run_schedule_command(args, store)
    return run_request_command(args, store)
