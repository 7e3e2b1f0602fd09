"""``idemflow schedules list|pause|resume|trigger``: an operator's view of the schedules and the
three things done to one.

``list`` and ``trigger`` need the schedules' definitions (``--schedules MODULE:ATTR``, as the
workers are given them): a cron expression and a workflow live in code, the store holds only each
schedule's state. ``pause`` and ``resume`` need only its name.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from idemflow.cli.loading import load_schedules
from idemflow.errors import InvalidInputError
from idemflow.scheduling.definition import find_schedule
from idemflow.scheduling.operations import pause_schedule, resume_schedule, schedules, trigger_schedule
from idemflow.stores import Store
from idemflow.worker import open_queue


def add_schedule_parser(commands: Any) -> None:
    """``idemflow schedules``."""
    parser = commands.add_parser("schedules", help="list, pause, resume or trigger schedules")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="each schedule: paused, last tick fired, next tick")
    listing.add_argument("--store", required=True)
    listing.add_argument(
        "--schedules", required=True, metavar="MODULE:ATTR", help="the schedules' definitions"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    for action, said in (("pause", "fire no tick until resumed"), ("resume", "fire ticks after now again")):
        switch = actions.add_parser(action, help=said)
        switch.add_argument("--store", required=True)
        switch.add_argument("name")
    trigger = actions.add_parser("trigger", help="fire one tick now (or at --at) as its own request")
    trigger.add_argument("--store", required=True)
    trigger.add_argument("--queue", required=True)
    trigger.add_argument(
        "--schedules", required=True, metavar="MODULE:ATTR", help="the schedules' definitions"
    )
    trigger.add_argument(
        "--at",
        help="the tick's instant: ISO 8601 with an offset (2027-01-16T03:00:00+01:00) or epoch seconds",
    )
    trigger.add_argument("name")


def _when(text: str | None) -> float | datetime | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInputError(f"--at takes ISO 8601 with an offset or epoch seconds, not {text!r}") from exc


def _shown(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_schedule_command(args: argparse.Namespace, store: Store) -> int:
    """Run ``idemflow schedules ACTION``; prints what it did."""
    if args.action == "list":
        views = schedules(store, load_schedules(args.schedules))
        for view in views:
            if args.json:
                print(json.dumps({name: getattr(view, name) for name in view.__slots__}))
            else:
                mode = "paused" if view.paused else "active"
                print(
                    f"{view.name}\t{view.workflow}\t{view.cron!r} {view.timezone}\t{mode}\t"
                    f"last {_shown(view.last_tick)}\tnext {_shown(view.next_tick)}\tcatchup {view.catchup}"
                )
        return 0
    if args.action in ("pause", "resume"):
        switch = pause_schedule if args.action == "pause" else resume_schedule
        state = switch(store, args.name)
        print(f"{args.name}: {'paused' if state.paused else 'resumed'}, ticks after {_shown(state.after)}")
        return 0
    rest = find_schedule(load_schedules(args.schedules), args.name)
    queue = open_queue(args.queue)
    try:
        at = _when(args.at)
        pending = trigger_schedule(store, queue, rest, at=at)
    finally:
        queue.close()
    print(f"{pending.request_id}: {pending.status().value}")
    return 0
