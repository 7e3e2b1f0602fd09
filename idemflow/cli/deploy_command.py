"""``idemflow check-deploy``: the open requests replayed on the code about to be deployed, reading
only; exit status 1 if any would break, so a CI job can stop the deploy.

    idemflow check-deploy --store URL --workflows MODULE:ATTR [--workflow NAME] [--json]

Prints one line per request the code would refuse (workflow, version, request id, the step and
both identities, or the version the code lacks), then how many requests were replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from idemflow.admin import check_deploy
from idemflow.cli.loading import load_workflows
from idemflow.operator.deploy_check import PAGE
from idemflow.stores import Store

BREAKS = 1
"""The exit status when a request would break (2 stays the status of a command that failed)."""


def add_deploy_parser(commands: Any) -> None:
    """The ``check-deploy`` parser."""
    parser = commands.add_parser(
        "check-deploy", help="replay the open requests on new code, reading only: exit 1 if any would break"
    )
    parser.add_argument("--store", required=True)
    parser.add_argument(
        "--workflows", required=True, action="append", help="MODULE:ATTR, the code to deploy (as for worker)"
    )
    parser.add_argument("--workflow", help="check the requests of this workflow only")
    parser.add_argument("--page", type=int, default=PAGE, help=f"requests replayed together (default {PAGE})")
    parser.add_argument("--json", action="store_true", help="one JSON object")


def run_deploy_command(args: argparse.Namespace, store: Store) -> int:
    """Run ``check-deploy`` on ``store``; its exit status."""
    flows = [flow for spec in args.workflows for flow in load_workflows(spec)]
    found = check_deploy(store, flows, workflow=args.workflow, page=args.page)
    if args.json:
        print(json.dumps(found.to_json()))
    else:
        for problem in found.problems:
            print(problem.line())
        verdict = "none would break" if found.ok else f"{len(found.problems)} would break"
        aside = f" ({found.not_replayed} started by run, not replayed)" if found.not_replayed else ""
        print(f"{found.checked} open request(s) replayed: {verdict}{aside}")
    sys.stdout.flush()
    return 0 if found.ok else BREAKS
