"""What the auction's requests look like, and the checks that turn a JSON body into one.

Pure functions with no store, kept apart from the workflows because three
callers share them: the HTTP API (which answers 422 before anything runs),
``register`` and ``bid`` (which check their input again, so a request that
did not come through the API is refused too) and the load.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, NotRequired, TypedDict

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_MONEY = 10**12
MAX_DURATION = 30 * 24 * 3600.0


class Deposit(TypedDict):
    """Input of :func:`deposit`: opens the wallet on first use; ``amount`` may be 0."""

    owner: str
    amount: int


class NewItem(TypedDict):
    """Input of :func:`register`: exactly one of ``closes_at`` (epoch seconds) and ``closes_in`` (seconds)."""

    title: str
    seller: str
    min_price: int
    closes_at: NotRequired[float]
    closes_in: NotRequired[float]
    id: NotRequired[str]


class BidRequest(TypedDict):
    """Input of :func:`bid`."""

    item: str
    bidder: str
    amount: int


class Invalid(ValueError):
    """A request whose shape is wrong; raised before anything runs (the API answers 422)."""


def _name(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if type(value) is not str or not value.strip() or len(value) > 100:
        raise Invalid(f"{field!r} must be a non-empty string of at most 100 characters")
    return value


def _money(body: dict[str, Any], field: str, least: int) -> int:
    value = body.get(field)
    if type(value) is not int or not least <= value <= MAX_MONEY:
        raise Invalid(f"{field!r} must be a whole number from {least} to {MAX_MONEY}, not {value!r}")
    return value


def _fields(body: object, required: set[str], optional: Collection[str] = ()) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Invalid(f"expected a JSON object with {sorted(required)}")
    missing, unknown = required - set(body), set(body) - required - set(optional)
    if missing or unknown:
        raise Invalid(f"missing {sorted(missing)}, unknown {sorted(unknown)}; expected {sorted(required)}")
    return body


def parse_deposit(body: object) -> Deposit:
    """Validate a deposit; :class:`Invalid` says what is wrong."""
    fields = _fields(body, {"owner", "amount"})
    return {"owner": _name(fields, "owner"), "amount": _money(fields, "amount", 0)}


def parse_item(body: object) -> NewItem:
    """Validate an item to register.

    >>> parse_item({"title": "Lamp", "seller": "sam", "min_price": 0, "closes_in": 60})
    Traceback (most recent call last):
    ...
    samples.auction.validation.Invalid: 'min_price' must be a whole number from 1 to 1000000000000, not 0
    """
    fields = _fields(body, {"title", "seller", "min_price"}, {"closes_at", "closes_in", "id"})
    item: NewItem = {
        "title": _name(fields, "title"),
        "seller": _name(fields, "seller"),
        "min_price": _money(fields, "min_price", 1),
    }
    if ("closes_at" in fields) == ("closes_in" in fields):
        raise Invalid("give exactly one of 'closes_at' (epoch seconds) and 'closes_in' (seconds from now)")
    field = "closes_at" if "closes_at" in fields else "closes_in"
    value = fields[field]
    if type(value) not in (int, float) or not 0 < value < (MAX_DURATION if field == "closes_in" else 1e11):
        raise Invalid(f"{field!r} must be a positive number of seconds, not {value!r}")
    if field == "closes_at":
        item["closes_at"] = float(value)
    else:
        item["closes_in"] = float(value)
    if "id" in fields:
        if type(fields["id"]) is not str or not _ID.fullmatch(fields["id"]):
            raise Invalid(f"'id' must be 1-64 letters, digits, '_' or '-', not {fields['id']!r}")
        item["id"] = fields["id"]
    return item


def parse_bid(item: str, body: object) -> BidRequest:
    """Validate a bid's shape (whether it is high enough and in time is the workflow's business)."""
    fields = _fields(body, {"bidder", "amount"})
    return {"item": item, "bidder": _name(fields, "bidder"), "amount": _money(fields, "amount", 1)}


__all__ = ["BidRequest", "Deposit", "Invalid", "NewItem", "parse_bid", "parse_deposit", "parse_item"]
