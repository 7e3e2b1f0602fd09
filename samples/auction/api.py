"""The auction's HTTP API (Starlette on uvicorn): clients send their own request ids and retry freely.

Every ``POST`` takes the client's request id in an ``Idempotency-Key``
header (required) and runs its workflow under it: a bidder whose connection
dropped sends the same bid again with the same key and gets the first
answer; the bid is recorded, led and counted once. Reusing a key for a
different body is refused (422).

=======================================  ==========================================================
``POST /wallets``                        deposit ``{"owner", "amount"}`` (opens the wallet): 200
``GET  /wallets/{owner}``                balance, deposits, what was paid and sold
``POST /items``                          register ``{"title", "seller", "min_price", "closes_in"}``
                                         (or ``closes_at``, epoch seconds; optional ``id``): 201
``GET  /items/{item}``                   terms, status, leader, result
``POST /items/{item}/bids``              bid ``{"bidder", "amount"}``: 201 with the recorded bid, or
                                         with a queue 202 ``{"status": "running", "status_url", ...}``
``GET  /bids/{request_id}``              where a submitted bid stands (asynchronous variant): 202
                                         while running, 200 once final
``GET  /items/{item}/winner``            what the front end polls: the leader, then the result
``GET  /items/{item}/closing``           the item's closing timer: 202 while it waits for the
                                         closing time, 200 once it closed the item (``completed``
                                         and the result) or was refused (``aborted``, the reason)
``POST /items/{item}/close``             close: 200 ``{"status": "sold" | "unsold", ...}``
``GET  /popular?limit=10``               the most-bid items
``GET  /healthz``                        200 when the server is up
=======================================  ==========================================================

Refusals are JSON ``{"error": code, "detail": message}``: 404 ``not_found``;
409 ``closed``, ``too_low``, ``exists``, ``still_open``, ``already_closed``;
422 ``invalid``, ``below_minimum``, ``own_item``, ``no_wallet``,
``idempotency_key_reused``; 400 for a missing key or a body that is not
JSON; 503 when the store is busy (retry with the same key). A close whose winner cannot
pay is not an error: it answers 200 with ``"status": "unsold"`` and the
reason, after the compensations ran.

With a ``queue`` the bids are submitted asynchronously (the paper's
variant): the bidder is answered ``202`` once the bid is placed — refusals
come at once, as before — and ``idemflow worker
samples.auction.workflows:WORKFLOWS`` processes mark the leader and count
it in ``popular``; ``GET /bids/{request_id}`` says ``running``, then
``completed`` with the recorded bid. Wallets, items and closes always run
in the server; with a queue an item's registration is *submitted* too (it
has no checkpoint, so it runs to its end here and answers 201 as without
one): the closing timer it starts is then queued at once, by this server,
instead of waiting for a worker's outbox relay pass. Either way the
workers close the items at their closing times
(:mod:`samples.auction.closing`); ``POST /items/{item}/close`` remains for
a client who wants to close it itself.

The time comes from an injectable ``clock`` (tests move it past closing
time); workflows read it once per request through ``now()``. What workers
run (a submitted bid's lead and count, the closing timers) reads the
workers' clock. Everything runs on the
event loop (:mod:`idemflow.asgi` runs the workflows and answers the errors,
the reads are awaited); the plumbing the samples share is :mod:`samples._api`.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idemflow import WorkflowAborted
from idemflow.asgi import error
from samples._api import Service, application, get_, post
from samples.auction import workflows

STATUSES = {
    "not_found": 404,
    "closed": 409,
    "too_low": 409,
    "exists": 409,
    "still_open": 409,
    "already_closed": 409,
    "invalid": 422,
    "below_minimum": 422,
    "own_item": 422,
    "no_wallet": 422,
}
"""HTTP status of each refusal code of :mod:`samples.auction.workflows`."""


class AuctionService(Service):
    """What the API does, as ``async`` calls answering responses (usable without HTTP).

    With a ``queue``, bids are submitted asynchronously: the bidder is
    answered at the workflow's checkpoint (after the bid is placed) and
    ``idemflow worker samples.auction.workflows:WORKFLOWS`` leads and counts it.

    >>> from idemflow.stores import MemoryStore
    >>> from samples._api import Direct
    >>> service = AuctionService(MemoryStore(), clock=lambda: 1000.0)
    >>> vase = {"id": "vase", "title": "Vase", "seller": "sam", "min_price": 5, "closes_in": 60}
    >>> with Direct(service) as call:
    ...     call(service.deposit, "k1", {"owner": "sam", "amount": 0}).status
    ...     call(service.register, "k2", vase).body["closes_at"]
    ...     call(service.bid, "k3", "vase", {"bidder": "ada", "amount": 4}).body["error"]
    200
    1060.0
    'below_minimum'
    """

    statuses = STATUSES
    invalid = workflows.Invalid
    status_url = "/bids/{request_id}"

    async def deposit(self, key: str, body: object) -> Response:
        parsed = workflows.parse_deposit(body)
        await self.run(workflows.deposit(parsed), key)
        return JSONResponse({"owner": parsed["owner"], "deposited": parsed["amount"]})

    async def register(self, key: str, body: object) -> Response:
        listing = workflows.register(workflows.parse_item(body))
        if self.queue is None:  # the timer's first pointer waits for a worker's relay pass
            return JSONResponse(await self.run(listing, key), 201)
        return await self.submit(listing, key, done=201)  # sends it now; final: no checkpoint

    async def bid(self, key: str, item: str, body: object) -> Response:
        req = workflows.parse_bid(item, body)
        if self.queue is None:
            return JSONResponse(await self.run(workflows.bid(req), key), 201)
        return await self.submit(workflows.bid(req), key, done=201, accepted=req)

    async def bid_status(self, request_id: str) -> Response:
        return await self.idem.status("bid", request_id)

    async def close(self, key: str, item: str) -> Response:
        try:
            return JSONResponse(await self.run(workflows.close({"item": item}), key))
        except WorkflowAborted as aborted:
            reason = aborted.reason
            if isinstance(reason, dict) and reason.get("code") == "payment_failed":
                return JSONResponse({"item": item, "status": "unsold", "reason": reason["message"]})
            raise

    async def closing(self, item: str) -> Response:
        return await self.idem.status(workflows.auto_close.name, workflows.timer_id(item))

    async def item(self, item: str) -> Response:
        found = await workflows.aitem_view(self.store, item)
        return JSONResponse(found) if found else error(404, "not_found", f"no item {item!r}")

    async def winner(self, item: str) -> Response:
        return JSONResponse(await workflows.awinner_view(self.store, item))

    async def wallet(self, owner: str) -> Response:
        found = await workflows.awallet(self.store, owner)
        return (
            JSONResponse({"owner": owner, **found})
            if found
            else error(404, "not_found", f"no wallet {owner!r}")
        )

    async def popular(self, limit: str) -> Response:
        if not limit.isdigit() or not 1 <= int(limit) <= 100:
            return error(422, "invalid", "limit must be a whole number from 1 to 100")
        return JSONResponse({"items": await workflows.apopular(self.store, int(limit))})


def create_app(service: AuctionService) -> Starlette:
    """The ASGI application over ``service`` (see the module docstring for the routes)."""
    return application(
        service,
        [
            Route(
                "/wallets", post(service, lambda key, _p, body: service.deposit(key, body)), methods=["POST"]
            ),
            Route("/wallets/{owner}", get_(lambda p, _q: service.wallet(p["owner"]))),
            Route(
                "/items", post(service, lambda key, _p, body: service.register(key, body)), methods=["POST"]
            ),
            Route("/items/{item}", get_(lambda p, _q: service.item(p["item"]))),
            Route(
                "/items/{item}/bids",
                post(service, lambda key, p, body: service.bid(key, p["item"], body)),
                methods=["POST"],
            ),
            Route("/items/{item}/winner", get_(lambda p, _q: service.winner(p["item"]))),
            Route("/items/{item}/closing", get_(lambda p, _q: service.closing(p["item"]))),
            Route(
                "/items/{item}/close",
                post(service, lambda key, p, _body: service.close(key, p["item"])),
                methods=["POST"],
            ),
            Route("/bids/{request_id}", get_(lambda p, _q: service.bid_status(p["request_id"]))),
            Route("/popular", get_(lambda _p, q: service.popular(q.get("limit", "10")))),
        ],
    )


__all__ = ["STATUSES", "AuctionService", "create_app"]
