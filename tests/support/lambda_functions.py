"""The functions the Lambda sandbox tests deploy
(``python -m awslambdaric tests.support.lambda_functions.X``).

Configured as a Lambda function is, by environment: ``IDEMFLOW_STORE_URL``,
``IDEMFLOW_QUEUE_URL``, ``IDEMFLOW_SIGNING_KEY``, and ``LAMBDA_GATE_DIR`` for the
gate that holds a request inside a step until the test has killed the sandbox.
``orders`` is an HTTP endpoint (``http_handler``); ``survey_api`` the survey sample's
Starlette app through Mangum (built only with ``LAMBDA_ASGI`` set).
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from datetime import datetime
from pathlib import Path
from typing import Any

from idemflow import Idem, Schedule, Tx, atomic, checkpoint, workflow
from idemflow.aws_lambda import HttpRequest, http_handler, schedule_handler, schedules_handler, sqs_handler
from idemflow.errors import BackendError
from idemflow.running.workflows import Workflow
from idemflow.stores.base import Row, RowRef, Store
from tests.support.async_workflows import survey


def _gate(request: str) -> None:
    """The first time a request reaches it in any sandbox: say so, then hold until killed."""
    folder = os.environ.get("LAMBDA_GATE_DIR")
    if not folder:
        return
    entered = Path(folder) / f"{request}.entered"
    if entered.exists():
        return
    entered.write_text(str(os.getpid()))
    release = Path(folder) / f"{request}.release"
    while not release.exists():  # the test kills this sandbox here
        time.sleep(0.01)


def _meet(request: str, parties: int) -> None:
    """Hold each of ``parties`` racing executions of ``request`` until all of them reached here
    (at most 10 s), so their steps overlap rather than follow each other."""
    folder = os.environ.get("LAMBDA_GATE_DIR")
    if not folder or parties < 2:
        return
    (Path(folder) / f"{request}.{os.getpid()}.met").write_text("")
    deadline = time.monotonic() + 10
    while len(list(Path(folder).glob(f"{request}.*.met"))) < parties and time.monotonic() < deadline:
        time.sleep(0.005)


def _count(tx: Tx, request: str, *, gated: bool = True, meet: int = 0) -> int:
    _meet(request, meet)
    if gated:
        _gate(request)
    count = int(tx.get(request, 0)) + 1
    tx.put(request, count)
    return count


@workflow("gated")
def gated(space: str, request: str) -> Generator[Idem[Any], Any, Any]:
    """One effect per request, counted in ``tableb``; its step holds at the gate."""
    yield checkpoint()
    return (yield atomic("tableb", space + "effects", lambda tx: _count(tx, request), name="effect"))


@workflow("lambda-tick")
def ticked(space: str, tick: str) -> Generator[Idem[Any], Any, Any]:
    """A schedule's tick: counted once in ``tableb`` under its instant, after its checkpoint."""
    yield checkpoint()
    at = int(datetime.fromisoformat(tick).timestamp())
    return (yield atomic("tableb", space + "ticks", lambda tx: tx.increment(f"t{at}"), name="tick"))


HOURLY = Schedule("hourly", ticked, cron="0 * * * *", input="s-", catchup="all")
"""The schedule the scheduler functions fire (a test moves its state row back two hours first)."""

WORKFLOWS: list[Workflow[Any, Any]] = [survey, gated, ticked]

STORE_URL = os.environ.get("IDEMFLOW_STORE_URL", "memory:")
QUEUE_URL = os.environ.get("IDEMFLOW_QUEUE_URL", "memory:")
"""Nothing is opened before the first invocation: importing this module (pytest does) is free."""


def place_order(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
    """``POST /orders``: one effect per key, counted in ``tableb`` under the body's ``space``.

    ``{"gate": true}`` holds the first execution inside its step (the test kills it there);
    ``{"meet": N}`` holds N racing executions until all reached the step; ``{"closed": true}``
    is refused with a reason the handler maps to 410."""
    body = request.body
    if body.get("closed"):
        yield atomic("tablea", body["space"] + "closed", lambda tx: tx.abort({"code": "closed"}))
    gate, meet = bool(body.get("gate")), int(body.get("meet", 0))
    count = yield atomic(
        "tableb",
        body["space"] + "orders",
        lambda tx: _count(tx, request.key, gated=gate, meet=meet),
        name="effect",
    )
    return {"order": request.key, "count": count, "item": body.get("item")}


ORDER_OPTIONS: dict[str, Any] = {
    "status": 201,
    "refusals": {"closed": 410},
    "name": "tests.support.lambda_functions.orders",
}
orders = http_handler(STORE_URL, **ORDER_OPTIONS)(place_order)


worker = sqs_handler(WORKFLOWS, store=STORE_URL, queue=QUEUE_URL)
relay = schedule_handler(store=STORE_URL, queue=QUEUE_URL)
schedules = schedules_handler([HOURLY], store=STORE_URL, queue=QUEUE_URL)


class PoisonedReads:
    """A real store whose reads of a ``poison`` request's rows fail with an error nobody resends."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def read(self, ref: RowRef) -> Row | None:
        if "poison" in ref.key or "poison" in ref.partition:
            raise BackendError(f"injected failure reading {ref.key!r}")
        return self._store.read(ref)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _poisoned() -> Any:
    from idemflow import open_store

    store: Any = PoisonedReads(open_store(STORE_URL))
    return sqs_handler(WORKFLOWS, store=store, queue=QUEUE_URL)


poisoned = _poisoned() if os.environ.get("LAMBDA_POISONED") else None


def _survey_api() -> Any:
    """The survey sample's Starlette app (``idemflow.asgi``) as a Lambda handler, through Mangum.

    Mangum runs the app's lifespan around each invocation, so the service opens its store in
    the invocation and closes it (its completion records written) before the handler returns."""
    from mangum import Mangum

    from samples.survey.api import SurveyService, create_app

    return Mangum(create_app(SurveyService(STORE_URL)), lifespan="auto")


survey_api = _survey_api() if os.environ.get("LAMBDA_ASGI") else None
