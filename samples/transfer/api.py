"""The bank's HTTP API (Starlette on uvicorn): clients send their own request ids and retry freely.

Every ``POST`` takes the client's request id in an ``Idempotency-Key``
header (required) and runs the workflow under it: a client that timed out or
saw the server die sends the same request again with the same key and gets
the first answer, and the money moves once.

==========================================  ==========================================================
``POST /accounts``                          open ``{"account", "balance"}``: 201 ``{"account", "balance"}``
``GET  /accounts/{account}``                ``{"account", "balance"}``
``POST /transfers``                         ``{"src", "dst", "amount"}``: 200 ``{"transfer", "left"}``, or
                                            with a queue 202 ``{"status": "running", "status_url", ...}``
                                            once the money left ``src`` (a worker credits ``dst`` or
                                            refunds)
``GET  /transfers/{request_id}``            where a submitted transfer stands (asynchronous variant):
                                            202 while running, 200 once final
``GET  /healthz``                           200 when the server is up
==========================================  ==========================================================

Refusals are JSON ``{"error": code, "detail": reason}``, ``reason`` being the
workflow's own abort reason: 404 ``no_such_account``, 409
``insufficient_funds`` and ``account_exists``, 422 ``invalid`` (a body of the
wrong shape, a non-positive amount); plus :mod:`idemflow.asgi`'s 400 (no
or bad key; ``invalid_json`` here), 422 ``idempotency_key_reused`` and 503
(busy: retry with the same key). Everything runs on the event loop: the
workflows through :mod:`idemflow.asgi`, the balance read awaited, the store
an asynchronous one opened in the app's lifespan (:mod:`samples._api`).
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idemflow import Idem, WorkflowAborted
from idemflow.asgi import error
from idemflow.client import aget
from samples._api import Service, application, get_, post
from samples.transfer import workflows
from samples.transfer.workflows import OpenRequest, TransferRequest


class Invalid(ValueError):
    """A request body of the wrong shape (422)."""


def refusal(reason: object) -> Response:
    """The answer for a workflow's abort ``reason`` (the transfer sample's reasons are text)."""
    text = str(reason)
    if text.startswith(workflows.missing("")):
        return error(404, "no_such_account", text)
    if text == "insufficient funds":
        return error(409, "insufficient_funds", text)
    if text.startswith("account exists"):
        return error(409, "account_exists", text)
    return error(422, "invalid", text)


def parse_open(body: object) -> OpenRequest:
    if not isinstance(body, dict) or set(body) != {"account", "balance"}:
        raise Invalid('an account is {"account": name, "balance": whole number}')
    account, balance = body["account"], body["balance"]
    if not isinstance(account, str) or not account or type(balance) is not int or balance < 0:
        raise Invalid("account must be a non-empty string and balance a whole number >= 0")
    return {"account": account, "balance": balance}


def parse_transfer(body: object) -> TransferRequest:
    if not isinstance(body, dict) or set(body) != {"src", "dst", "amount"}:
        raise Invalid('a transfer is {"src": account, "dst": account, "amount": whole number}')
    src, dst, amount = body["src"], body["dst"], body["amount"]
    if not all(isinstance(name, str) and name for name in (src, dst)):
        raise Invalid("src and dst must be account names")
    return {"src": src, "dst": dst, "amount": amount}  # the workflow refuses a bad amount itself


class TransferService(Service):
    """What the API does, as ``async`` calls answering responses (usable without HTTP).

    With a ``queue``, transfers are submitted asynchronously: the client is
    answered at the workflow's checkpoint, once the debit committed, and
    ``idemflow worker samples.transfer.workflows:WORKFLOWS`` credits the
    destination (or refunds the debit if there is no such account).

    >>> from idemflow.stores import MemoryStore
    >>> from samples._api import Direct
    >>> bank = TransferService(MemoryStore())
    >>> with Direct(bank) as call:
    ...     call(bank.open_account, "k1", {"account": "ada", "balance": 10}).status
    ...     call(bank.transfer, "k2", {"src": "ada", "dst": "bob", "amount": 3})
    ...     call(bank.account, "ada").body
    201
    Answer(status=404, body={'error': 'no_such_account', 'detail': 'no such account: bob'})
    {'account': 'ada', 'balance': 10}
    """

    invalid = Invalid
    status_url = "/transfers/{request_id}"

    def failure(self, exc: Exception) -> Response | None:
        if isinstance(exc, WorkflowAborted):  # the transfer's reasons are text, not {"code", "message"}
            return refusal(exc.reason)
        return super().failure(exc)

    async def open_account(self, key: str, body: object) -> Response:
        req = parse_open(body)
        balance = await self.run(workflows.open_account(req), key)
        return JSONResponse({"account": req["account"], "balance": balance}, 201)

    async def transfer(self, key: str, body: object) -> Response:
        m: Idem[Any] = workflows.transfer(parse_transfer(body))
        if self.queue is None:
            return JSONResponse(await self.run(m, key))
        return await self.submit(m, key, done=200)

    async def transfer_status(self, request_id: str) -> Response:
        return await self.idem.status("transfer", request_id)

    async def account(self, name: str) -> Response:
        balance = await aget(self.store, workflows.ACCOUNTS, name, "balance")
        if balance is None:
            return error(404, "no_such_account", workflows.missing(name))
        return JSONResponse({"account": name, "balance": balance})


def create_app(service: TransferService) -> Starlette:
    """The ASGI application over ``service`` (see the module docstring for the routes)."""
    return application(
        service,
        [
            Route(
                "/accounts",
                post(service, lambda key, _p, body: service.open_account(key, body)),
                methods=["POST"],
            ),
            Route("/accounts/{account}", get_(lambda p, _q: service.account(p["account"]))),
            Route(
                "/transfers",
                post(service, lambda key, _p, body: service.transfer(key, body)),
                methods=["POST"],
            ),
            Route("/transfers/{request_id}", get_(lambda p, _q: service.transfer_status(p["request_id"]))),
        ],
    )


__all__ = ["Invalid", "TransferService", "create_app", "parse_open", "parse_transfer", "refusal"]
