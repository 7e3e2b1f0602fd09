"""Calls to a botocore client as values: what the DynamoDB store and the SQS queue share.

Their per-operation logic is written once as generators that yield
:class:`SdkCall` values; a blocking client (boto3) or an asynchronous one
(aiobotocore) answers them (:func:`drive`, :func:`adrive`). Neither backend
module owns this, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from idemflow.core.trampoline import atrampoline, trampoline

Q = TypeVar("Q")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SdkCall:
    """One call of the low-level client: ``client.<operation>(**kwargs)``, or with ``waiter``
    set, ``client.get_waiter(operation).wait(**kwargs)``. Each counts as one round trip."""

    operation: str
    kwargs: dict[str, Any]
    waiter: bool = False


Calls = Generator[SdkCall, Any, T]
"""An operation that yields SDK calls and returns a ``T``."""


def drive(calls: Generator[Q, Any, T], invoke: Callable[[Q], Any]) -> T:
    """Run ``calls`` to their value, answering each with ``invoke`` (a blocking client)."""
    return trampoline(calls, invoke)


async def adrive(calls: Generator[Q, Any, T], invoke: Callable[[Q], Awaitable[Any]]) -> T:
    """:func:`drive`, each call awaited (an asynchronous client)."""
    return await atrampoline(calls, invoke)
