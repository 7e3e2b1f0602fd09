"""The survey's three tables, their row keys, and the shapes of what goes in and out.

The workflows (:mod:`samples.survey.workflows`), the validation (:mod:`samples.survey.validation`)
and the reads (:mod:`samples.survey.reads`) all build on these; this module imports none of them.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

SURVEYS = "surveys"
"""Survey definitions: partition = survey id, key ``survey``."""
RESPONSES = "responses"
"""Responses: partition = survey id, key ``r:<respondent>``; key ``survey`` holds a copy of the definition."""
SUMMARIES = "summaries"
"""Counters: partition = survey id, sharded counters ``responses`` and ``q:<question>:<option>``
(rows ``<counter>#<shard>``; :func:`idemflow.aggregates.totals` folds them)."""
TABLES = (SURVEYS, RESPONSES, SUMMARIES)

DEFINITION = "survey"
COUNT = "responses"
SHARDS = 16
"""Shard rows per counter: about the number of responses expected to be counted at once."""


class Question(TypedDict):
    """One single-choice question; ``id`` is 1-64 letters, digits, ``_`` or ``-``."""

    id: str
    text: str
    options: list[str]


class NewSurvey(TypedDict):
    """Input of :func:`create_survey`; without ``id`` one is derived from the request id."""

    title: str
    questions: list[Question]
    id: NotRequired[str]


class Survey(TypedDict):
    """A stored survey definition."""

    id: str
    title: str
    questions: list[Question]


class Response(TypedDict):
    """Input of :func:`respond`: one respondent's answer (an option) to every question."""

    survey: str
    respondent: str
    answers: dict[str, str]


class Counted(TypedDict):
    """Result of :func:`respond`."""

    survey: str
    respondent: str
    counted: bool


class Created(TypedDict):
    """Result of :func:`create_survey`."""

    survey: str


Refusal = dict[str, Any]
"""Every abort reason of this sample: ``{"code": ..., "message": ...}``, a code for programs, a message
for people. (A plain dict, not a TypedDict: abort reasons are typed as JSON.)"""


STATUSES = {"not_found": 404, "invalid": 422, "exists": 409, "already_responded": 409}
"""HTTP status of each refusal code (:func:`refusal`): the ASGI app's and the Lambda handler's."""


def refusal(code: str, message: str) -> Refusal:
    """An abort reason (``not_found``, ``invalid``, ``exists``, ``already_responded``)."""
    return {"code": code, "message": message}


def respondent_key(respondent: str) -> str:
    return "r:" + respondent


def option_key(question: str, option: str) -> str:
    return f"q:{question}:{option}"


__all__ = [
    "COUNT",
    "DEFINITION",
    "RESPONSES",
    "SHARDS",
    "SUMMARIES",
    "SURVEYS",
    "TABLES",
    "Counted",
    "Created",
    "NewSurvey",
    "Question",
    "Refusal",
    "Response",
    "Survey",
    "option_key",
    "refusal",
    "respondent_key",
]
