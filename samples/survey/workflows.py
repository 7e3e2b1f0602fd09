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
no-op; under :func:`idemflow.client.submit` the client is answered
after step 1 and a worker finishes step 2. Either way a response submitted
any number of times, concurrently or after crashes, is counted once — the
invariant :func:`check` verifies from the tables alone.

The tables and the shapes of requests and results are in :mod:`samples.survey.tables`, their
validation in :mod:`samples.survey.validation`, the reads and :func:`check` in
:mod:`samples.survey.reads`; this module re-exports them.

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
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

from collections.abc import Callable, Generator, Mapping
from typing import Any

from idemflow import Idem, ShardedCounter, Tx, Workflow, abort, atomic, checkpoint, uuid4, workflow
from samples.survey.reads import Verdict, aresults, asurvey, check, results, summary, survey
from samples.survey.tables import (
    COUNT,
    DEFINITION,
    RESPONSES,
    SHARDS,
    SUMMARIES,
    SURVEYS,
    TABLES,
    Counted,
    Created,
    NewSurvey,
    Question,
    Refusal,
    Response,
    Survey,
    option_key,
    refusal,
    respondent_key,
)
from samples.survey.validation import Invalid, answer_problem, parse_response, parse_survey

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
