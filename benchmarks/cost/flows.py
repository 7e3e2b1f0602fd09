"""The idemflow side of ``cost``: workflows of 1, 2 and 5 steps, each step one ``atomic`` doing
the data write of the hand-written variants' step (:mod:`benchmarks.cost.handwritten`), and the
event every variant is called with.

Step 1 records the user's response (``tx.put`` in ``responses``), each later step adds one to a
counter (``tx.increment`` in ``summaries``): the 2-step workflow writes what the bare handler of
the Powertools comparison writes (``PutItem`` + ``UpdateItem ADD``).

Why apart: every backend's variants and the hand-written code share these names and shapes, so the
data written can only differ where the protocols do.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, Workflow, atomic, workflow

SURVEY = "s1"
"""The partition every row lives in."""
COUNTERS = ("yes", "yes3", "yes4", "yes5")
"""The counter step k (k >= 2) adds to: step 2's is the bare handler's."""
STEPS = (1, 2, 5)
TABLES = ("responses", "summaries")
RESULT: dict[str, str] = {"status": "ok"}
"""What every variant answers."""

Handler = Callable[[dict[str, Any]], Any]
"""Called with :func:`event`; answers :data:`RESULT`."""


def event(number: int) -> dict[str, Any]:
    """Request ``number``'s event: its key (``id``) and its user."""
    return {"id": f"q{number}", "user": f"u{number}"}


def _record(user: str) -> Callable[[Tx], None]:
    def record(tx: Tx) -> None:
        tx.put(user, "yes")

    return record


def _add(counter: str) -> Callable[[Tx], None]:
    def add(tx: Tx) -> None:
        tx.increment(counter)

    return add


def steps_workflow(steps: int) -> Workflow[[dict[str, Any]], dict[str, str]]:
    """``steps`` atomic steps: record the response, then add to ``steps - 1`` counters."""

    @workflow(f"cost_steps{steps}")
    def flow(request: dict[str, Any]) -> Generator[Idem[Any], Any, dict[str, str]]:
        yield atomic("responses", SURVEY, _record(request["user"]))
        for counter in COUNTERS[: steps - 1]:
            yield atomic("summaries", SURVEY, _add(counter))
        return dict(RESULT)

    return flow


WORKFLOWS = {steps: steps_workflow(steps) for steps in STEPS}
