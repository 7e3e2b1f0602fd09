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
``GET  /transfers/{request_id}``            where a submitted transfer stands (asynchronous variant)
``GET  /healthz``                           200 when the server is up
==========================================  ==========================================================

Refusals are JSON ``{"error": code, "detail": reason}``, ``reason`` being the
workflow's own abort reason: 404 ``no_such_account``, 409
``insufficient_funds`` and ``account_exists``, 422 ``invalid`` (a body of the
wrong shape, a non-positive amount); plus the shared 400, 409
``idempotency_key_reused`` and 503 (busy: retry with the same key).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.routing import Route

from idemflow import Idem, get, run
from idemflow.compensation import WorkflowAborted
from samples._api import Answer, Service, error, get_, healthz, post
from samples.transfer import workflows
from samples.transfer.workflows import OpenRequest, TransferRequest


class Invalid(ValueError):
    """A request body of the wrong shape (422)."""


def refusal(reason: object) -> Answer:
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
    """What the API does, as plain calls returning :class:`Answer` (usable without HTTP).

    With a ``queue``, transfers are submitted asynchronously: the client is
    answered at the workflow's checkpoint, once the debit committed, and
    ``idemflow worker samples.transfer.workflows:WORKFLOWS`` credits the
    destination (or refunds the debit if there is no such account).

    >>> from idemflow import MemoryStore
    >>> bank = TransferService(MemoryStore())
    >>> bank.open_account("k1", {"account": "ada", "balance": 10}).status
    201
    >>> bank.transfer("k2", {"src": "ada", "dst": "bob", "amount": 3})
    Answer(status=404, body={'error': 'no_such_account', 'detail': 'no such account: bob'})
    >>> bank.account("ada").body
    {'account': 'ada', 'balance': 10}
    """

    invalid = Invalid

    def refuse(self, aborted: WorkflowAborted) -> Answer:
        return refusal(aborted.reason)  # the transfer's reasons are text, not {"code", "message"}

    def open_account(self, key: str | None, body: object) -> Answer:
        def action(key: str) -> Answer:
            req = parse_open(body)
            balance = run(workflows.open_account(req), request_id=key, store=self.store, clock=self.clock)
            return Answer(201, {"account": req["account"], "balance": balance})

        return self.guarded(key, action)

    def transfer(self, key: str | None, body: object) -> Answer:
        def action(key: str) -> Answer:
            m: Idem[Any] = workflows.transfer(parse_transfer(body))
            if self.queue is None:
                receipt = run(m, request_id=key, store=self.store, clock=self.clock)
                return Answer(200, dict(receipt))
            return self.submitted(m, key, "/transfers/" + quote(key, safe=""), done=200)

        return self.guarded(key, action)

    def transfer_status(self, request_id: str) -> Answer:
        return self.request_status("transfer", request_id)

    def account(self, name: str) -> Answer:
        balance = get(self.store, workflows.ACCOUNTS, name, "balance")
        if balance is None:
            return error(404, "no_such_account", workflows.missing(name))
        return Answer(200, {"account": name, "balance": balance})


def create_app(service: TransferService) -> Starlette:
    """The ASGI application over ``service`` (see the module docstring for the routes)."""
    routes = [
        Route("/healthz", healthz),
        Route("/accounts", post(lambda key, _p, body: service.open_account(key, body)), methods=["POST"]),
        Route("/accounts/{account}", get_(lambda p, _q: service.account(p["account"]))),
        Route("/transfers", post(lambda key, _p, body: service.transfer(key, body)), methods=["POST"]),
        Route("/transfers/{request_id}", get_(lambda p, _q: service.transfer_status(p["request_id"]))),
    ]
    return Starlette(routes=routes)


__all__ = ["Invalid", "TransferService", "create_app", "parse_open", "parse_transfer", "refusal"]
