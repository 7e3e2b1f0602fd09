"""A step as telemetry and the engine's log see it: a span, and one DEBUG line when it ends.

Only executions that have OpenTelemetry on or the ``idemflow.engine`` logger at
DEBUG go through here (decided once, in :class:`~idemflow.engine.given.Given`); the
hot path of every other execution never builds the fields below.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from idemflow import telemetry
from idemflow.core.requests import Steps
from idemflow.engine.cursor import Cursor
from idemflow.engine.deferred import DeferredCommit
from idemflow.engine.given import Given
from idemflow.engine.memo_reader import AbortWorkflow, WaitOver


def observed(
    given: Given,
    cursor: Cursor,
    deferred: DeferredCommit,
    identity: str,
    step: Steps[Any],
    attempts: Callable[[], int],
) -> Steps[Any]:
    """``step`` with its span and its log line: committed, replayed, aborted or raised, with its
    attempts (``attempts()`` once it ended: retries beyond the first) and duration."""
    fields = {
        "workflow": given.workflow,
        "request_id": given.request_id,
        "step": cursor.step,
        "identity": identity,
    }
    started, commits = time.monotonic(), cursor.commits
    outcome = "raised"
    try:
        with telemetry.span("idemflow.step", **fields) if given.traced else contextlib.nullcontext():
            value = yield from step
        # A step whose commit waits for the workflow's next move is committed with it.
        outcome = "committed" if cursor.commits > commits or deferred.pending is not None else "replayed"
        return value
    except AbortWorkflow:
        outcome = "aborted"
        raise
    except WaitOver:  # an abort's memo at a wait met what a worker committed there
        outcome = "replayed"
        raise
    except GeneratorExit:  # a branch an any_of let go (or one that outlived its all_of's failure)
        outcome = "abandoned"
        raise
    finally:
        if given.logged:
            given.log_event(
                "step",
                step=fields["step"],
                identity=identity,
                outcome=outcome,
                attempt=attempts() + 1,
                started=started,
            )
