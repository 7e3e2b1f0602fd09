"""API Gateway and Function URL events in, proxy-integration responses out, for the HTTP handlers.

:mod:`idemflow.aws_lambda` builds :func:`~idemflow.aws_lambda.http_handler`; this module holds
what it needs of the events: a REST API event (payload 1.0, with ``multiValueHeaders``), an
HTTP API or Function URL event (payload 2.0, header names lower-case, repeated headers joined
with commas) read into one :class:`HttpRequest`, checked before anything is written, and the
answer in the proxy-integration shape both payload versions accept.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import decimal
import enum
import inspect
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from idemflow.errors import IdemflowError, InvalidInputError, LimitExceededError
from idemflow.integrations.http_answers import OUTSIDE_FAILURES, Refusal, one_key, refusal
from idemflow.integrations.lambda_context import LambdaContext
from idemflow.integrations.lambda_queues import seconds_left, store_of
from idemflow.running.handlers import _derived_name, _refuse_a_plain_function, decorated
from idemflow.running.workflows import Workflow
from idemflow.stores.base import Store

if TYPE_CHECKING:
    from idemflow.core.policy import RetryPolicy
    from idemflow.running.answer_cache import AnswerCache
    from idemflow.stores.base import Store

REPLAYED_HEADER = "Idempotent-Replayed"
"""Set to ``true`` on an answer that was an earlier call's (no step of this call committed)."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One HTTP request as the handler sees it, whichever API delivered it.

    ``headers`` have lower-case names; ``query`` holds each parameter's values joined with
    commas (as payload 2.0 sends them); ``body`` is the parsed JSON body (None when empty);
    ``key`` the checked ``Idempotency-Key``. ``event`` and ``context`` are Lambda's own.
    Duplicates are compared on ``method``, ``path``, ``query`` and ``body``.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    path_parameters: Mapping[str, str]
    body: Any
    key: str
    context: LambdaContext | None = field(default=None, compare=False, repr=False)
    event: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def fingerprint(self) -> dict[str, Any]:
        """What a duplicate must repeat: a retry may differ in its trace headers and request
        context, not in what it asks for."""
        return {"method": self.method, "path": self.path, "query": dict(self.query), "body": self.body}


def _strings(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"the event's {what} must be an object, not {type(value).__name__}")
    return dict(value)


def event_version(event: object) -> str:
    """``"1.0"`` for a REST API (or an HTTP API on payload 1.0), ``"2.0"`` for an HTTP API on
    payload 2.0 or a Function URL. Anything else is a function wired to the wrong trigger:
    :class:`~idemflow.errors.InvalidInputError`, which fails the invocation (not a 400).

    >>> event_version({"version": "2.0", "requestContext": {"http": {"method": "POST"}}})
    '2.0'
    """
    if isinstance(event, Mapping):
        if "httpMethod" in event:
            return "1.0"
        context = event.get("requestContext")
        if event.get("version") == "2.0" and isinstance(context, Mapping) and "http" in context:
            return "2.0"
        shown = f"an event with the fields {sorted(map(str, event))[:8]}"
    else:
        shown = f"a {type(event).__name__}"
    raise InvalidInputError(
        f"the HTTP handler takes an API Gateway (REST or HTTP API) or Function URL event, not {shown}"
    )


def _headers(event: Mapping[str, Any], version: str) -> dict[str, list[str]]:
    """Every header's values, by lower-case name (API Gateway may keep the client's case)."""
    found: dict[str, list[str]] = {}
    for name, value in _strings(event.get("headers"), "headers").items():
        found.setdefault(str(name).lower(), []).append(str(value))
    if version == "1.0":  # multiValueHeaders has every value; headers has the last
        for name, values in _strings(event.get("multiValueHeaders"), "multiValueHeaders").items():
            if isinstance(values, list):
                found[str(name).lower()] = [str(v) for v in values]
    return found


def _query(event: Mapping[str, Any], version: str) -> dict[str, str]:
    if version == "1.0":
        multi = _strings(event.get("multiValueQueryStringParameters"), "multiValueQueryStringParameters")
        if multi:
            return {
                str(k): ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in multi.items()
            }
    single = _strings(event.get("queryStringParameters"), "queryStringParameters")
    return {str(k): str(v) for k, v in single.items()}


def _too_large(limit: int, size: int | None = None) -> LimitExceededError:
    """A body over the handler's ``max_body_bytes``: answered 413 before it is decoded."""
    return LimitExceededError("the request body", f"over {limit} bytes" + (f" ({size})" if size else ""))


def _body(event: Mapping[str, Any], limit: int) -> Any:
    raw = event.get("body")
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise InvalidInputError(f"the event's body must be a string, not {type(raw).__name__}")
    if event.get("isBase64Encoded"):
        if len(raw) > (limit + 2) // 3 * 4 + 4:  # longer than any encoding of `limit` bytes
            raise _too_large(limit)
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInputError("the body is marked base64 but is not base64") from None
    else:
        if len(raw) > limit:  # every character is at least one byte
            raise _too_large(limit)
        data = raw.encode("utf-8", "surrogatepass")
    if len(data) > limit:
        raise _too_large(limit, len(data))
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"the body is not JSON: {exc}") from None


def read_request(
    event: Mapping[str, Any],
    version: str,
    context: LambdaContext | None,
    *,
    key_header: str,
    max_body_bytes: int,
) -> HttpRequest:
    """The request an event carries, checked: its key, its body's size and JSON.

    A missing key is :class:`~idemflow.errors.MissingIdempotencyKeyError`; a key sent twice with
    two values, a body that is not JSON are :class:`~idemflow.errors.InvalidInputError`; a
    body over ``max_body_bytes`` is :class:`~idemflow.errors.LimitExceededError`. All before
    anything is written.
    """
    headers = _headers(event, version)
    key = one_key(headers.get(key_header.lower(), []), key_header)
    if version == "1.0":
        method, path = event.get("httpMethod"), event.get("path")
    else:
        method, path = event["requestContext"]["http"].get("method"), event.get("rawPath")
    if not isinstance(method, str) or not isinstance(path, str):
        raise InvalidInputError("the event has no HTTP method or path")
    return HttpRequest(
        method=method.upper(),
        path=path,
        headers={name: ",".join(values) for name, values in headers.items()},
        query=_query(event, version),
        path_parameters={
            str(k): str(v) for k, v in _strings(event.get("pathParameters"), "pathParameters").items()
        },
        body=_body(event, max_body_bytes),
        key=key,
        context=context,
        event=event,
    )


def _plain(value: object) -> Any:
    """A workflow's result as JSON can carry it: what the codecs bring back as themselves
    (``Decimal``, dates, ``UUID``, enums, dataclasses, pydantic models) in their JSON form."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


def respond(status: int, body: Any, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A proxy-integration response (REST and HTTP APIs, Function URLs): a JSON body."""
    text = json.dumps(body, default=_plain, separators=(",", ":"))  # ASCII: no lone surrogate breaks it
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": text,
        "isBase64Encoded": False,
    }


def refused(found: Refusal) -> dict[str, Any]:
    """An error answer as :mod:`idemflow.asgi` gives it: ``{"error": code, "detail": ...}``."""
    return respond(found.status, found.body(), found.headers)


class Replayed:
    """The answer of a call that replayed an earlier one (``on_replay`` wraps it in this)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _key(request: HttpRequest) -> str:
    return request.key


def _fingerprint(request: HttpRequest) -> dict[str, Any]:
    return request.fingerprint()


class HttpHandler:
    """``handler(event, context)`` for API Gateway or a Function URL (see
    :func:`~idemflow.aws_lambda.http_handler`)."""

    def __init__(
        self,
        function: Callable[[HttpRequest], Any],
        *,
        store: str | Store,
        options: HttpOptions,
    ) -> None:

        inner = function.function if isinstance(function, Workflow) else function
        if not callable(inner) or inspect.iscoroutinefunction(inner):
            raise InvalidInputError(
                "an HTTP handler on Lambda is a workflow (a generator, or a function returning an Idem) "
                "run on a blocking store; an asyncio app runs on Lambda through Mangum with idemflow.asgi"
            )
        if not isinstance(store, str | Store):
            raise InvalidInputError(f"an HTTP handler needs a blocking store or its URL, not {store!r}")
        if isinstance(function, Workflow):  # its records keep the workflow's own name
            if options.name not in (None, function.name):
                raise InvalidInputError(f"@workflow {function.name!r} keeps its name; leave out name=")
            self.name = function.name
        else:
            _refuse_a_plain_function(function)
            self.name = options.name or _derived_name(function)
        self._function = function
        self._store = store
        self.options = options
        self._opened: Store | None = None

    @property
    def store(self) -> Store | None:
        """The store this sandbox opened (None before the first invocation): one per URL, shared."""
        return self._opened

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:

        version = event_version(event)  # the wrong trigger fails the invocation, not the client
        options = self.options
        try:
            request = read_request(
                event, version, context, key_header=options.key_header, max_body_bytes=options.max_body_bytes
            )
        except LimitExceededError as exc:
            return refused(Refusal(413, "payload_too_large", str(exc)))
        except InvalidInputError as exc:
            return refused(refusal(exc) or Refusal(400, "invalid_input", str(exc)))
        remaining = seconds_left(context)
        ends, left = time.time() + remaining, remaining - options.reserve
        if left <= 0:  # not even one attempt would end before the function's timeout
            detail = f"the invocation has no time left; retry with the same {options.key_header}"
            return refused(Refusal(503, "busy", detail, {"Retry-After": "1"}))
        store = self._opened = store_of(self._store)
        try:
            try:
                answer = self._run(store, request, left, ends)
            finally:
                store.flush()  # the completion record: durable before the sandbox is frozen
        except (IdemflowError, *OUTSIDE_FAILURES) as exc:  # a flush that failed is answered too (503)
            found = refusal(exc, options.refusals)
            if found is None:
                raise
            return refused(found)
        if isinstance(answer, Replayed):
            return respond(options.status, answer.value, {REPLAYED_HEADER: "true"})
        return respond(options.status, answer)

    def _run(self, store: Store, request: HttpRequest, seconds: float, ends: float) -> Any:
        """The request under ``@idempotent``, each step retrying no longer than ``seconds`` and
        no effect lease outliving the invocation's end (``ends``, epoch seconds)."""

        options = self.options
        policy = dataclasses.replace(options.policy, deadline=min(options.policy.deadline, seconds))
        call = decorated(
            store,
            self._function,
            _key,
            self.name,
            policy,
            _fingerprint,
            True,
            Replayed,
            options.cache,
            lease_until=ends,
        )
        return call(request)


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How an :class:`HttpHandler` reads requests and answers (checked by ``http_handler``)."""

    key_header: str
    status: int
    refusals: Mapping[str, int]
    policy: RetryPolicy
    reserve: float
    max_body_bytes: int
    name: str | None
    cache: AnswerCache | None
