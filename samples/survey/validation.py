"""Whether a survey or a response is well formed: pure functions, no store.

Shared by the workflows (:mod:`samples.survey.workflows`), the API (:mod:`samples.survey.api`),
the checker (:mod:`samples.survey.reads`) and the load, so it depends on the tables' shapes only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from samples.survey.tables import NewSurvey, Question, Response, Survey

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_QUESTIONS = 20
MAX_OPTIONS = 20
MAX_TEXT = 500


class Invalid(ValueError):
    """A request whose shape is wrong; raised before anything runs (the API answers 422)."""


def _text(value: object, what: str, limit: int = MAX_TEXT) -> str:
    if type(value) is not str or not value.strip() or len(value) > limit:
        raise Invalid(f"{what} must be a non-empty string of at most {limit} characters")
    return value


def _ident(value: object, what: str) -> str:
    if type(value) is not str or not _ID.fullmatch(value):
        raise Invalid(f"{what} must be 1-64 letters, digits, '_' or '-', not {value!r}")
    return value


def parse_survey(body: object) -> NewSurvey:
    """Validate a survey definition as a client sends it; :class:`Invalid` says what is wrong.

    >>> parse_survey({"title": "T", "questions": [{"id": "q", "text": "?", "options": ["a"]}]})
    Traceback (most recent call last):
    ...
    samples.survey.validation.Invalid: question 'q' needs 2 to 20 distinct options
    """
    if not isinstance(body, dict):
        raise Invalid("a survey is a JSON object with 'title' and 'questions'")
    unknown = set(body) - {"id", "title", "questions"}
    if unknown:
        raise Invalid(f"unknown field(s) {sorted(unknown)}; a survey has 'id', 'title' and 'questions'")
    questions = body.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= MAX_QUESTIONS:
        raise Invalid(f"'questions' must be a list of 1 to {MAX_QUESTIONS} questions")
    parsed: list[Question] = []
    for n, question in enumerate(questions):
        if not isinstance(question, dict) or set(question) != {"id", "text", "options"}:
            raise Invalid(f"question {n} must be an object with exactly 'id', 'text' and 'options'")
        qid = _ident(question["id"], f"question {n} id")
        options = question["options"]
        if (
            not isinstance(options, list)
            or not 2 <= len(options) <= MAX_OPTIONS
            or len(set(map(str, options))) != len(options)
        ):
            raise Invalid(f"question {qid!r} needs 2 to {MAX_OPTIONS} distinct options")
        parsed.append(
            {
                "id": qid,
                "text": _text(question["text"], f"question {qid!r} text"),
                "options": [_text(option, f"an option of question {qid!r}", 100) for option in options],
            }
        )
    if len({q["id"] for q in parsed}) != len(parsed):
        raise Invalid("question ids must be distinct")
    survey: NewSurvey = {"title": _text(body.get("title"), "'title'", 200), "questions": parsed}
    if "id" in body:
        survey["id"] = _ident(body["id"], "survey 'id'")
    return survey


def parse_response(survey_id: str, body: object) -> Response:
    """Validate the shape of a response (which options exist is the workflow's business)."""
    if not isinstance(body, dict) or set(body) != {"respondent", "answers"}:
        raise Invalid("a response is a JSON object with exactly 'respondent' and 'answers'")
    answers = body["answers"]
    if not isinstance(answers, dict) or not all(type(v) is str for v in answers.values()):
        raise Invalid("'answers' must map each question id to the chosen option (a string)")
    return {
        "survey": _ident(survey_id, "survey id"),
        "respondent": _text(body["respondent"], "'respondent'", 100),
        "answers": dict(answers),
    }


def answer_problem(survey: Survey, answers: Mapping[str, str]) -> str | None:
    """Why ``answers`` is not one option for every question of ``survey``, or None."""
    questions = {q["id"]: q for q in survey["questions"]}
    unknown = sorted(set(answers) - set(questions))
    if unknown:
        return f"survey {survey['id']!r} has no question {unknown[0]!r}"
    for qid, question in questions.items():
        if qid not in answers:
            return f"question {qid!r} is not answered"
        if answers[qid] not in question["options"]:
            return f"{answers[qid]!r} is not an option of question {qid!r} (options: {question['options']})"
    return None


__all__ = [
    "MAX_OPTIONS",
    "MAX_QUESTIONS",
    "MAX_TEXT",
    "Invalid",
    "answer_problem",
    "parse_response",
    "parse_survey",
]
