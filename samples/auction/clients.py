"""How the load reaches the auction: over HTTP, or by calling the service with no HTTP.

One :class:`AuctionApi` protocol, two implementations, so the load and its
checks are written once and run the same against a real server (the demo)
and in process (the tests).
"""

from __future__ import annotations

from typing import Protocol

from samples import _harness as harness
from samples._api import Answer, Direct
from samples.auction.api import AuctionService


class AuctionApi(Protocol):
    """What the load calls: :class:`AuctionHttp`, or :class:`AuctionDirect` (no HTTP)."""

    def deposit(self, key: str, body: object) -> Answer: ...
    def register(self, key: str, body: object) -> Answer: ...
    def bid(self, key: str, item: str, body: object) -> Answer: ...
    def bid_status(self, request_id: str) -> Answer: ...
    def close(self, key: str, item: str) -> Answer: ...
    def closing(self, item: str) -> Answer: ...
    def winner(self, item: str) -> Answer: ...
    def popular(self, limit: str) -> Answer: ...


class AuctionHttp:
    """:class:`AuctionApi` over HTTP."""

    def __init__(self, client: harness.HttpClient) -> None:
        self.client = client

    def deposit(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/wallets", key=key, body=body)

    def register(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/items", key=key, body=body)

    def bid(self, key: str, item: str, body: object) -> Answer:
        return self.client.request("POST", f"/items/{item}/bids", key=key, body=body)

    def bid_status(self, request_id: str) -> Answer:
        return self.client.request("GET", f"/bids/{request_id}")

    def close(self, key: str, item: str) -> Answer:
        return self.client.request("POST", f"/items/{item}/close", key=key, body={})

    def closing(self, item: str) -> Answer:
        return self.client.request("GET", f"/items/{item}/closing")

    def winner(self, item: str) -> Answer:
        return self.client.request("GET", f"/items/{item}/winner")

    def popular(self, limit: str) -> Answer:
        return self.client.request("GET", "/popular", params={"limit": limit})


class AuctionDirect:
    """:class:`AuctionApi` without HTTP: :class:`~samples.auction.api.AuctionService`'s methods,
    awaited on the event loop of a :class:`~samples._api.Direct`."""

    def __init__(self, call: Direct[AuctionService]) -> None:
        self.call, self.service = call, call.service

    def deposit(self, key: str, body: object) -> Answer:
        return self.call(self.service.deposit, key, body)

    def register(self, key: str, body: object) -> Answer:
        return self.call(self.service.register, key, body)

    def bid(self, key: str, item: str, body: object) -> Answer:
        return self.call(self.service.bid, key, item, body)

    def bid_status(self, request_id: str) -> Answer:
        return self.call(self.service.bid_status, request_id)

    def close(self, key: str, item: str) -> Answer:
        return self.call(self.service.close, key, item)

    def closing(self, item: str) -> Answer:
        return self.call(self.service.closing, item)

    def winner(self, item: str) -> Answer:
        return self.call(self.service.winner, item)

    def popular(self, limit: str) -> Answer:
        return self.call(self.service.popular, limit)


__all__ = ["AuctionApi", "AuctionDirect", "AuctionHttp"]
