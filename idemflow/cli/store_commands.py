"""A store's upkeep from the command line: ``tables create`` (provision) and ``gc`` (collect
finished requests' rows, vacuum SQLite, count expired rows).

Both act on the store itself rather than on one request, and both are what a deploy or a cron
job runs, so they are one group of the command line with its options here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from idemflow.admin import collect, expired_stats
from idemflow.errors import InvalidInputError
from idemflow.keys import check_table
from idemflow.operator.collection import parse_duration
from idemflow.stores import Store
from idemflow.stores.base import Shrinking

COMMANDS = ("tables", "gc")
"""The commands this module parses and runs."""


def add_store_parsers(commands: Any) -> None:
    """The parsers of :data:`COMMANDS`, in the order ``idemflow --help`` lists them."""
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


def run_store_command(args: argparse.Namespace, store: Store) -> int:
    """Run one of :data:`COMMANDS` on ``store`` and print what it did."""
    if args.command == "tables":
        names = [check_table(name) for name in args.names]
        store.create_tables(*names)
        print(f"created (or found) tables: {', '.join(names)} and the run-record table")
        return 0
    return _gc(args, store)


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
            f"{report.published_rows} event and stream rows, {report.run_records} run records; "
            f"{report.pages_released} free pages given back"
        )
    if args.vacuum:
        assert isinstance(store, Shrinking)
        before, after = store.vacuum()
        print(f"vacuumed: {before:,} bytes before, {after:,} after")
    if args.stats:
        print(json.dumps(expired_stats(store).to_json()))
    return 0
