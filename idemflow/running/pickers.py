"""What an ``@idempotent`` handler keys and compares on: a function of its arguments, or a path.

A path is a JMESPath expression (the ``jmespath`` library, as Powertools'
``event_key_jmespath``) searched in the handler's arguments by parameter
name, defaults included: with ``def place(order, *, channel="web")``,
``"order.id"`` is the order's id and ``"[order.customer, channel]"`` a list.
"""

from __future__ import annotations

import base64
import gzip
import inspect
import json
from collections.abc import Callable
from typing import Any

import jmespath
import jmespath.functions
from jmespath.exceptions import JMESPathError

from idemflow.codecs import model_fields
from idemflow.errors import InvalidInputError


class _Functions(jmespath.functions.Functions):
    """Powertools' JMESPath functions, so its key paths keep working unchanged: a JSON string
    field (API Gateway's ``body``), base64, and base64 of gzip (CloudWatch Logs)."""

    @jmespath.functions.signature({"types": ["string"]})
    def _func_powertools_json(self, value: str) -> Any:
        return json.loads(value)

    @jmespath.functions.signature({"types": ["string"]})
    def _func_powertools_base64(self, value: str) -> str:
        return base64.b64decode(value).decode()

    @jmespath.functions.signature({"types": ["string"]})
    def _func_powertools_base64_gzip(self, value: str) -> str:
        return gzip.decompress(base64.b64decode(value)).decode()


_FUNCTIONS = _Functions()
_OPTIONS = jmespath.Options(custom_functions=_FUNCTIONS)

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
    unknown = _unknown_functions(expression.parsed)  # jmespath itself finds them only on data
    if unknown:
        raise InvalidInputError(f"@idempotent {what} {pick!r} calls unknown functions: {', '.join(unknown)}")
    signature = inspect.signature(handler)

    def search(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            return expression.search(searchable(dict(bound.arguments)), options=_OPTIONS)
        except JMESPathError as exc:  # an unknown function or a wrong type shows only on data
            raise InvalidInputError(f"@idempotent {what} {pick!r} failed on this call: {exc}") from None

    return search


def _unknown_functions(node: Any) -> list[str]:
    """Names of functions the parsed path calls that neither JMESPath nor Powertools define."""
    found = []
    if node.get("type") == "function_expression" and node["value"] not in _FUNCTIONS.FUNCTION_TABLE:
        found.append(str(node["value"]))
    for child in node.get("children", []):
        if isinstance(child, dict):
            found.extend(_unknown_functions(child))
    return found


def searchable(value: Any) -> Any:
    """``value`` with dataclasses and pydantic models as dicts of their fields, so a path can
    look inside them (``"payment.transaction_id"``) as Powertools' paths do."""
    if type(value) is dict:
        return {key: searchable(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return [searchable(item) for item in value]
    fields = model_fields(value)
    return value if fields is None else searchable(fields)
