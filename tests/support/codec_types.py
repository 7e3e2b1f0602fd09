"""Module-level types the codec tests store (a stored class is found again by its name)."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

import pydantic


class Tier(enum.Enum):
    BASIC = "basic"
    GOLD = "gold"


@dataclass(frozen=True)
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


@dataclass(frozen=True)
class Order:
    id: uuid.UUID
    placed: dt.datetime
    lines: list[Line]
    tier: Tier = Tier.BASIC
    ships_on: dt.date | None = None
    total: Decimal = field(init=False, default=Decimal(0))

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "total", sum((line.price * line.quantity for line in self.lines), Decimal(0))
        )


class Receipt(pydantic.BaseModel):
    order: uuid.UUID
    charged: Decimal
    at: dt.datetime
    notes: list[str] = []


def an_order(n: int = 1) -> Order:
    return Order(
        id=uuid.UUID(int=n),
        placed=dt.datetime(2026, 11, 23, 20, 0, n, 123456, tzinfo=dt.UTC),
        lines=[Line("tea", Decimal("3.10"), 2), Line("cup", Decimal("0.05"))],
        tier=Tier.GOLD,
        ships_on=dt.date(2026, 11, 30),
    )
