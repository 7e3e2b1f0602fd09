"""Reading the survey's tables: the results for the API and tools, and :func:`check`, the invariants.

Not steps (nothing is memoized), so apart from the workflows in :mod:`samples.survey.workflows`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idemflow import ShardedCounter
from idemflow.client import aget, arows, get, rows
from idemflow.stores import AsyncStore, Store
from samples.survey.tables import COUNT, DEFINITION, RESPONSES, SUMMARIES, SURVEYS, Survey, option_key
from samples.survey.validation import answer_problem

# Each read is a pure fold over the rows it needs (:func:`summary`), fetched by a blocking
# function for tools and checks, or awaited by its ``a``-twin for the API.


def summary(survey_id: str, definition: Survey | None, counters: Mapping[str, Any]) -> dict[str, Any] | None:
    """The results of a survey from its definition and its ``summaries`` rows (None: no such survey).

    >>> definition = {"id": "s", "title": "T", "questions": [{"id": "q", "text": "?", "options": ["a", "b"]}]}
    >>> summary("s", definition, {"responses#3": 2, "q:q:a#0": 1, "q:q:a#5": 1})
    {'survey': 's', 'title': 'T', 'responses': 2, 'questions': {'q': {'a': 2, 'b': 0}}}
    """
    if definition is None:
        return None
    found = ShardedCounter.totals(counters)
    return {
        "survey": survey_id,
        "title": definition["title"],
        "responses": found.get(COUNT, 0),
        "questions": {
            q["id"]: {option: found.get(option_key(q["id"], option), 0) for option in q["options"]}
            for q in definition["questions"]
        },
    }


def _counters(found: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    return {key: value for (_part, key), value in found.items()}


def survey(store: Store, survey_id: str) -> Survey | None:
    """The definition of a survey, or None."""
    found: Survey | None = get(store, SURVEYS, survey_id, DEFINITION)
    return found


async def asurvey(store: Store | AsyncStore, survey_id: str) -> Survey | None:
    """:func:`survey`, awaitable."""
    found: Survey | None = await aget(store, SURVEYS, survey_id, DEFINITION)
    return found


def results(store: Store, survey_id: str) -> dict[str, Any] | None:
    """How many responses were counted, and how many chose each option (None: no such survey)."""
    return summary(survey_id, survey(store, survey_id), _counters(rows(store, SUMMARIES, survey_id)))


async def aresults(store: Store | AsyncStore, survey_id: str) -> dict[str, Any] | None:
    """:func:`results`, awaitable (the definition and the counters read at once)."""
    definition, counters = await asyncio.gather(asurvey(store, survey_id), arows(store, SUMMARIES, survey_id))
    return summary(survey_id, definition, _counters(counters))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`check` found; ``problems`` is empty when every invariant holds."""

    surveys: int
    recorded: int
    """Response rows in ``responses``."""
    counted: int
    """Responses counted in ``summaries``."""
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """The verdict for people: one line per invariant, then the problems."""
        mark = "FAIL" if self.problems else " ok "
        return [
            f"  [{mark}] counted once: {self.surveys} surveys, {self.recorded} responses recorded, "
            f"{self.counted} counted in the summaries",
            *(f"  - {problem}" for problem in self.problems[:20]),
            *([f"  ... and {len(self.problems) - 20} more"] if len(self.problems) > 20 else []),
        ]


def _partitions(store: Store, table: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for (part, key), value in rows(store, table).items():
        found.setdefault(part, {})[key] = value
    return found


def check(store: Store, *, settled: bool = True) -> Verdict:
    """Verify the tables: every recorded response is valid and counted exactly once.

    For each survey: the copy of its definition in ``responses`` equals the
    original; each response row answers every question with an option; the
    ``responses`` counter equals the number of response rows; each option's
    counter equals the number of responses choosing it (so a response counted
    twice, or lost between the two steps, shows); no counter or response
    belongs to an unknown survey or option. Run it after the workers drained
    the queue: a response between its two steps is not counted *yet*.

    ``settled=False`` checks what must hold at every instant, while responses
    are being counted (the chaos suite checks it continuously): a counter may
    trail the responses, a survey being created may lack its copy, but
    nothing is counted more often than it was chosen. The tables are read
    summaries first, surveys last, so a row read later is never behind one
    read before.
    """
    problems: list[str] = []
    summaries = _partitions(store, SUMMARIES)
    responses = _partitions(store, RESPONSES)
    definitions = {part: row[DEFINITION] for part, row in _partitions(store, SURVEYS).items()}
    recorded = counted = 0
    for orphan in sorted((set(responses) | set(summaries)) - set(definitions)):
        problems.append(f"rows in responses or summaries for unknown survey {orphan!r}")
    for survey_id, definition in sorted(definitions.items()):
        partition = responses.get(survey_id, {})
        if partition.get(DEFINITION) != definition and (settled or DEFINITION in partition):
            problems.append(f"survey {survey_id!r}: the copy of its definition in responses differs")
        answers = {key[2:]: row["answers"] for key, row in partition.items() if key.startswith("r:")}
        recorded += len(answers)
        expected: dict[str, int] = {COUNT: len(answers)}
        for respondent, given in sorted(answers.items()):
            problem = answer_problem(definition, given)
            if problem is not None:
                problems.append(f"survey {survey_id!r}: response of {respondent!r} is invalid: {problem}")
            for question, option in given.items():
                key = option_key(question, option)
                expected[key] = expected.get(key, 0) + 1
        found = ShardedCounter.totals(summaries.get(survey_id, {}))
        counted += found.get(COUNT, 0)
        for key in sorted(set(found) | set(expected)):
            have, want = found.get(key, 0), expected.get(key, 0)
            if have == want or (not settled and have < want):
                continue
            if key == COUNT:
                problems.append(f"survey {survey_id!r}: {want} responses recorded, {have} counted")
            else:
                _q, question, option = key.split(":", 2)
                problems.append(
                    f"survey {survey_id!r}: option {option!r} of {question!r} counted {have} "
                    f"times, chosen by {want} responses"
                )
    return Verdict(len(definitions), recorded, counted, tuple(problems))


__all__ = [
    "Verdict",
    "aresults",
    "asurvey",
    "check",
    "results",
    "summary",
    "survey",
]
