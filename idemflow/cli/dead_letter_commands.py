"""``idemflow dead-letters list|redrive``: the messages no worker could read, printed as JSON
lines or put back on the queue.

The one command that needs a queue and no store (a dead letter names no request a store could
answer for), so it has its parser and its run here, apart from the store's commands.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from idemflow.admin import dead_letters, redrive
from idemflow.worker import open_queue


def add_dead_letter_parser(commands: Any) -> None:
    """``idemflow dead-letters``."""
    dead = commands.add_parser(
        "dead-letters", help="messages no worker could read (malformed, forged, unknown)"
    )
    dead.add_argument("action", choices=["list", "redrive"])
    dead.add_argument("--queue", required=True)
    dead.add_argument("--id", action="append", dest="ids", help="only these dead letters (repeatable)")
    dead.add_argument("--limit", type=int, help="list at most this many")


def run_dead_letter_command(args: argparse.Namespace) -> int:
    """List the dead letters (``--id``: only those) as JSON lines, or redrive them."""
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
