"""The paper's survey application, written the way a user of idemflow writes it.

A survey is a list of single-choice questions. Its definition lives in the
``surveys`` table (partition = survey id); a copy sits in the survey's
partition of ``responses``, so recording a response can validate it in the
same transaction that records it. Submitting a response is the paper's
two-step workflow, the steps on different tables and partitions:

1. **record** the response in ``responses/<survey>`` (key ``r:<respondent>``),
   refusing unknown surveys, invalid answers and a second response from the
   same respondent;
2. **summarize**: add it to the counters in ``summaries/<survey>``. Every
   response of a survey adds to these counters, so each is a
   :class:`~idemflow.ShardedCounter`: concurrent responses add to different
   shard rows and commit without meeting (one row per counter would cap a
   popular survey at that row's serial rate, with every concurrent
   response retrying on DynamoDB and Azure).

Between the two sits a ``checkpoint()``: under :func:`idemflow.run` it is a
no-op; under :func:`idemflow.async_worklist.submit` the client is answered
after step 1 and a worker finishes step 2. Either way a response submitted
any number of times, concurrently or after crashes, is counted once — the
invariant :func:`check` verifies from the tables alone.

>>> from idemflow import MemoryStore, run
>>> store = MemoryStore()
>>> run(create_survey({"id": "lunch", "title": "Lunch", "questions": [
...     {"id": "main", "text": "Main course?", "options": ["soup", "salad"]}]}),
...     request_id="c-1", store=store)
{'survey': 'lunch'}
>>> answer = {"survey": "lunch", "respondent": "ada", "answers": {"main": "soup"}}
>>> [run(respond(answer), request_id="r-1", store=store)["counted"] for _ in range(3)]
[True, True, True]
>>> results(store, "lunch")["questions"]
{'main': {'soup': 1, 'salad': 0}}
>>> check(store).ok
True
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from idemflow import (
    Idem,
    ShardedCounter,
    Store,
    Tx,
    Workflow,
    aget,
    arows,
    atomic,
    get,
    rows,
    uuid4,
    workflow,
)
from idemflow.aggregates import totals
from idemflow.async_worklist import checkpoint
from idemflow.compensation import abort
from idemflow.stores import AsyncStore

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

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_QUESTIONS = 20
MAX_OPTIONS = 20
MAX_TEXT = 500


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


def refusal(code: str, message: str) -> Refusal:
    """An abort reason (``not_found``, ``invalid``, ``exists``, ``already_responded``)."""
    return {"code": code, "message": message}


class Invalid(ValueError):
    """A request whose shape is wrong; raised before anything runs (the API answers 422)."""


# -- validation: pure functions, shared by the workflows, the API and the load ------------


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
    samples.survey.workflows.Invalid: question 'q' needs 2 to 20 distinct options
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


def respondent_key(respondent: str) -> str:
    return "r:" + respondent


def option_key(question: str, option: str) -> str:
    return f"q:{question}:{option}"


# -- step bodies ------------------------------------------------------------------------
# Factories bind the request's values; each step has a fixed ``name=``, so the
# memo identities stay stable across code reloads.


def _define(survey: Survey) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        if tx.get(DEFINITION) is not None:
            tx.abort(refusal("exists", f"survey {survey['id']!r} already exists"))
        tx.put(DEFINITION, dict(survey))

    return body


def _open(survey: Survey) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.put(DEFINITION, dict(survey))

    return body


def _record(response: Response) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        survey_id, respondent = response["survey"], response["respondent"]
        survey: Survey | None = tx.get(DEFINITION)
        if survey is None:
            tx.abort(refusal("not_found", f"no survey {survey_id!r}"))
        problem = answer_problem(survey, response["answers"])
        if problem is not None:
            tx.abort(refusal("invalid", problem))
        key = respondent_key(respondent)
        if tx.get(key) is not None:
            tx.abort(refusal("already_responded", f"{respondent!r} already answered survey {survey_id!r}"))
        tx.put(key, {"answers": response["answers"]})
        return respondent

    return body


def counter(key: str) -> ShardedCounter:
    """The sharded counter of a summary key (``responses`` or an option key)."""
    return ShardedCounter(key, SHARDS)


def _summarize(answers: Mapping[str, str]) -> Callable[[Tx], None]:
    # Adds to sharded counters only (no reads): concurrent responses rarely meet.
    def body(tx: Tx) -> None:
        counter(COUNT).add(tx)
        for question, option in answers.items():
            counter(option_key(question, option)).add(tx)

    return body


# -- workflows ---------------------------------------------------------------------------


@workflow("create_survey")
def create_survey(req: NewSurvey) -> Generator[Idem[Any], Any, Created]:
    """Store a survey and open it for responses; aborts ``invalid`` or ``exists``.

    Without an ``id`` in the input, :func:`idemflow.uuid4` derives one from
    the request id: a retry creates the same survey, never a second one.
    """
    try:
        parse_survey(dict(req))
    except Invalid as exc:
        yield abort(refusal("invalid", str(exc)))
    if "id" in req:
        survey_id = req["id"]
    else:
        survey_id = yield uuid4()
    survey: Survey = {"id": survey_id, "title": req["title"], "questions": req["questions"]}
    yield atomic(SURVEYS, survey_id, _define(survey), name="define")
    yield atomic(RESPONSES, survey_id, _open(survey), name="open")
    return {"survey": survey_id}


@workflow("respond")
def respond(response: Response) -> Generator[Idem[Any], Any, Counted]:
    """Record a response, then count it in the survey's summary; exactly once per request id.

    Aborts with ``not_found``, ``invalid`` or ``already_responded`` in the
    first step, before anything is written.
    """
    yield atomic(RESPONSES, response["survey"], _record(response), name="record")
    yield checkpoint()  # the asynchronous variant answers the client here
    yield atomic(SUMMARIES, response["survey"], _summarize(response["answers"]), name="summarize")
    return {"survey": response["survey"], "respondent": response["respondent"], "counted": True}


WORKFLOWS: list[Workflow[Any, Any]] = [create_survey, respond]
"""What a worker runs: ``idemflow worker samples.survey.workflows:WORKFLOWS``."""


# -- reads: for the API, tools and the checker (not steps: nothing is memoized) ---------------
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
    found = totals(counters)
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
        found = totals(summaries.get(survey_id, {}))
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
    "RESPONSES",
    "SUMMARIES",
    "SURVEYS",
    "TABLES",
    "WORKFLOWS",
    "Counted",
    "Created",
    "Invalid",
    "NewSurvey",
    "Question",
    "Refusal",
    "Response",
    "Survey",
    "Verdict",
    "answer_problem",
    "aresults",
    "asurvey",
    "check",
    "create_survey",
    "parse_response",
    "parse_survey",
    "refusal",
    "respond",
    "results",
    "summary",
    "survey",
]
