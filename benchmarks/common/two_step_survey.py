"""The 2-step survey workflow that ``cloud_survey`` and ``peers`` both time: record a response in
``responses``, count its answer in ``summaries``, each step one ``atomic``.

Why a module of its own: both benchmarks compare idemflow with hand-written code doing the same two
writes, so their idemflow side must be the same steps on the same tables; written once here, they
cannot drift apart. Each benchmark keeps the workflow name it always registered (``survey``,
``peer_survey``), so the rows it writes, and so its numbers, stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, Workflow, atomic, workflow


def _record(response: dict[str, Any]) -> Callable[[Tx], None]:
    def record(tx: Tx) -> None:
        tx.put(response["user"], response["answer"])

    return record


def _count(answer: str) -> Callable[[Tx], None]:
    def count(tx: Tx) -> None:
        tx.increment(answer)

    return count


def two_step_survey(name: str) -> Workflow[[dict[str, Any]], str]:
    """The workflow under ``name``; its input is ``{"survey": ..., "user": ..., "answer": ...}``."""

    @workflow(name)
    def survey(response: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
        """Record a response, count it."""
        yield atomic("responses", response["survey"], _record(response))
        yield atomic("summaries", response["survey"], _count(response["answer"]))
        return "ok"

    return survey


survey = two_step_survey("survey")
"""As ``cloud_survey`` registers it."""
peer_survey = two_step_survey("peer_survey")
"""As ``peers`` registers it, for its DBOS and its Powertools comparisons alike."""
