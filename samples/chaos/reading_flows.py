"""The workflows of the reading workload (:mod:`samples.chaos.reading`), as worker processes run them.

They live apart from the workload so a worker (``python -m samples.chaos worker reading``) imports
only what it runs. One ``chaos-job`` request publishes while it runs and does several things at
once:

1. ``checkpoint()``: the client only claims the request, worker processes run every step;
2. ``set_event("stage", ...)`` six times over its life (:func:`stages`: values derived from its
   input), so a reader can follow it and never sees it go back;
3. with ``kid``, ``start`` a ``chaos-job-kid`` child (request id: the job's + ``.kid``), which
   publishes its own stage and waits for the job to release it (``receive("go")``), so a cancel
   of the job always meets its child unfinished;
4. ``write_stream("tokens", ...)`` ``values`` times (:func:`token`), then ``close_stream``;
5. ``all_of`` of three quotes (``effect`` calls to an outside provider,
   :mod:`samples.chaos.reading_provider`, with a timeout and a retry policy: some calls are slow,
   some fail transiently, some answers are lost after the provider recorded the call);
6. ``now()``, then ``any_of(receive("nudge"), sleep(patience))``: the client sends a nudge to some
   requests while they wait here, none to the others;
7. with a kid: ``send`` it ``go`` and ``wait`` for it.

The result says what each step returned, for the checks (:mod:`samples.chaos.reading_checks`)
to hold against what the readers and the provider saw.

>>> req = job_request("j-1", values=3, mark=7, kid=False, nudged=False, quick=True)
>>> stages(req)[0], stages(req)[-1]
('j-1 0 started #7', 'j-1 5 done #7')
>>> [token(req, n) for n in range(2)]
['j-1:0/3', 'j-1:1/3']
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Generator
from typing import Any, TypedDict

from idemflow import (
    Idem,
    StepRetry,
    Workflow,
    abort,
    all_of,
    any_of,
    checkpoint,
    close_stream,
    effect,
    now,
    receive,
    send,
    set_event,
    sleep,
    start,
    wait,
    write_stream,
)
from idemflow import workflow as define
from idemflow.serialization import JSON

JOB, KID = "chaos-job", "chaos-job-kid"
STAGE, TOKENS, NUDGE, GO = "stage", "tokens", "nudge", "go"
TABLES: tuple[str, ...] = ()
"""The job writes no table of its own: all it leaves is its memos, events, streams and the
provider's books."""
BRANCHES = ("a", "b", "c")
"""The three quotes of every job's ``all_of``."""
STAGE_NAMES = ("started", "streaming", "streamed", "quoted", "decided", "done")
KID_STAGES = ("waiting", "released")
PROVIDER_ENV = "CHAOS_READING_URL"
"""Where the worker processes find the quote provider (the chaos driver sets it)."""
CALLER_HEADER = "X-Caller-Pid"
"""The calling process, so the provider can SIGKILL a worker right after it recorded a call."""
KID_PATIENCE = 120.0
"""Seconds a kid waits to be released before it aborts (only a kid its job never releases: a
cancel's cascade that missed it)."""

_endpoint: list[str] = []
"""The provider's URL in the driver's own process (the tests run the job there)."""


class JobRequest(TypedDict):
    id: str
    values: int
    """How many values the job writes to its stream."""
    mark: int
    """A number of the plan's, in every stage value: the events are derived from the input."""
    kid: bool
    nudged: bool
    """Whether the client nudges it while it waits in its ``any_of`` (the plan's, for the checks)."""
    patience: float
    """The ``any_of``'s sleep: a nudge sent before it ended must win."""
    timeout: float
    """Seconds a quote may take before the attempt fails."""
    retry: list[float]
    """The quotes' StepRetry: ``[initial, maximum_interval, expiry]``."""


class KidRequest(TypedDict):
    parent: str
    mark: int


class ProviderBusy(ConnectionError):
    """The provider answered 503 or could not be reached: retried by the quote's policy."""


class ProviderRefused(Exception):
    """Any other refusal: retried too, and visible in the provider's books."""


def job_request(
    request_id: str, *, values: int, mark: int, kid: bool, nudged: bool, quick: bool
) -> JobRequest:
    """A request with the run's timing: a quick run waits and times out sooner."""
    return {
        "id": request_id,
        "values": values,
        "mark": mark,
        "kid": kid,
        "nudged": nudged,
        "patience": 2.5 if quick else 4.0,
        "timeout": 1.0 if quick else 1.5,
        "retry": [0.1, 0.5, 90.0] if quick else [0.2, 1.0, 150.0],
    }


def kid_id(job_id: str) -> str:
    return f"{job_id}.kid"


def stages(req: JobRequest) -> list[str]:
    """The values of the job's ``stage`` event, in the order it sets them."""
    return [f"{req['id']} {n} {name} #{req['mark']}" for n, name in enumerate(STAGE_NAMES)]


def kid_stages(req: KidRequest) -> list[str]:
    return [f"{req['parent']}.kid {n} {name} #{req['mark']}" for n, name in enumerate(KID_STAGES)]


def token(req: JobRequest, n: int) -> str:
    """The ``n``-th value of the job's stream."""
    return f"{req['id']}:{n}/{req['values']}"


def nudge_of(request_id: str) -> str:
    """The message the client nudges a job with."""
    return f"nudge {request_id}"


def use_provider(url: str | None) -> None:
    """Call the provider at ``url`` from this process (None: from the environment again)."""
    _endpoint.clear()
    if url is not None:
        _endpoint.append(url)


def post(path: str, body: dict[str, JSON]) -> dict[str, JSON]:
    """One call to the provider; a refusal raises (every one is retried by the policy)."""
    url = (_endpoint[0] if _endpoint else os.environ[PROVIDER_ENV]) + path
    headers = {"Content-Type": "application/json", CALLER_HEADER: str(os.getpid())}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            found: dict[str, JSON] = json.loads(answer.read())
            return found
    except urllib.error.HTTPError as refused:
        detail = refused.read().decode(errors="replace")
        if refused.code == 503:
            raise ProviderBusy(detail) from None
        raise ProviderRefused(f"{refused.code}: {detail}") from None
    except OSError as unreachable:  # URLError, a reset connection, a socket timeout
        raise ProviderBusy(f"{type(unreachable).__name__}: {unreachable}") from None


def quote(req: JobRequest, branch: str) -> Callable[[str], dict[str, JSON]]:
    def call(idempotency_key: str) -> dict[str, JSON]:
        return post("/quote", {"key": idempotency_key, "request": req["id"], "branch": branch})

    return call


def _retry(req: JobRequest) -> StepRetry:
    initial, longest, expiry = req["retry"]
    return StepRetry(initial=initial, maximum_interval=longest, expiry=expiry)


@define(KID)
def kid(req: KidRequest) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    """Publishes that it waits, waits for its job's ``go``, publishes that it was released."""
    said = kid_stages(req)
    yield set_event(STAGE, said[0])
    go = yield receive(GO, timeout=KID_PATIENCE)
    if go is None:
        yield abort(f"{req['parent']} never released its kid")
    yield set_event(STAGE, said[1])
    return {"kid of": req["parent"], "go": go}


@define(JOB)
def job(req: JobRequest) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    """The steps of the module's docstring, in that order."""
    yield checkpoint()
    said = stages(req)
    yield set_event(STAGE, said[0])
    child = None
    if req["kid"]:
        child = yield start(kid({"parent": req["id"], "mark": req["mark"]}), request_id=kid_id(req["id"]))
    for n in range(req["values"]):
        yield write_stream(TOKENS, token(req, n))
        if n == req["values"] // 2:
            yield set_event(STAGE, said[1])
    yield close_stream(TOKENS)
    yield set_event(STAGE, said[2])
    calls = (
        effect(quote(req, branch), timeout=req["timeout"], retry=_retry(req), name=f"quote {branch}")
        for branch in BRANCHES
    )
    quotes = yield all_of(*calls)
    yield set_event(STAGE, said[3])
    waited_from: float = yield now()
    took, message = yield any_of(receive(NUDGE), sleep(req["patience"]))
    yield set_event(STAGE, said[4])
    kid_said: JSON = None
    if child is not None:
        yield send(kid, kid_id(req["id"]), GO, "go")
        kid_said = yield wait(child)
    yield set_event(STAGE, said[5])
    return {"quotes": quotes, "from": waited_from, "took": took, "message": message, "kid": kid_said}


WORKFLOWS: list[Workflow[Any, Any]] = [job, kid]
