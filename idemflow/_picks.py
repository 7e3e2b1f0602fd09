"""What an ``@idempotent`` handler keys and compares on: a function of its arguments, or a path.

A path is a JMESPath expression (the ``jmespath`` library, as Powertools'
``event_key_jmespath``) searched in the handler's arguments by parameter
name, defaults included: with ``def place(order, *, channel="web")``,
``"order.id"`` is the order's id and ``"[order.customer, channel]"`` a list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from idemflow.errors import InvalidInputError

Pick = Callable[..., Any] | str
"""A function called with the handler's arguments, or a JMESPath expression over them by name."""


def picker(pick: Pick, handler: Callable[..., Any], what: str) -> Callable[..., Any]:
    """``pick`` as a function of the handler's arguments; a bad path is refused here, at decoration."""
    if callable(pick):
        return pick
    if not isinstance(pick, str):
        raise InvalidInputError(f"@idempotent {what} must be a function or a JMESPath string, not {pick!r}")
    try:
        expression = jmespath.compile(pick)
    except JMESPathError as exc:
        raise InvalidInputError(f"@idempotent {what} {pick!r} is not a JMESPath expression: {exc}") from None
    signature = inspect.signature(handler)

    def search(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return expression.search(dict(bound.arguments))

    return search
