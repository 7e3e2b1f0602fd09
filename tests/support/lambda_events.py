"""API Gateway (REST payload 1.0, HTTP API payload 2.0) and Function URL events as AWS documents
them, built for tests, the Lambda chaos run and the latency benchmark.

Why apart: the benchmark and the chaos script build the same events as the tests, without
importing a test module (and its fixtures) to get them.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from tests.support.lambda_runtime import ACCOUNT

ORDERS = "tests.support.lambda_functions.orders"
"""The run records' workflow name: ``@idempotent``'s, the handler's module and name."""


def rest_event(
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    resource: str | None = None,
    path_parameters: dict[str, str] | None = None,
    raw_body: str | None = None,
    base64_body: bool = False,
) -> dict[str, Any]:
    """A REST API Lambda proxy event (payload 1.0)."""
    sent = {"Content-Type": "application/json", "User-Agent": "curl/8.5.0", **(headers or {})}
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    if text is not None and base64_body:
        text = base64.b64encode(text.encode()).decode()
    return {
        "resource": resource or path,
        "path": path,
        "httpMethod": method,
        "headers": sent,
        "multiValueHeaders": {name: [value] for name, value in sent.items()},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": path_parameters,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "1234567890",
            "domainName": "1234567890.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "1234567890",
            "extendedRequestId": f"{uuid.uuid4().hex[:16]}=",
            "httpMethod": method,
            "identity": {"sourceIp": "198.51.100.7", "userAgent": "curl/8.5.0", "accessKey": None},
            "path": f"/prod{path}",
            "protocol": "HTTP/1.1",
            "requestId": str(uuid.uuid4()),
            "requestTime": "27/Nov/2026:17:00:00 +0000",
            "requestTimeEpoch": 1795798800000,
            "resourceId": "abcdef",
            "resourcePath": resource or path,
            "stage": "prod",
        },
        "body": text,
        "isBase64Encoded": base64_body,
    }


def http_event(
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    route: str | None = None,
    path_parameters: dict[str, str] | None = None,
    raw_body: str | None = None,
    base64_body: bool = False,
    function_url: bool = False,
) -> dict[str, Any]:
    """An HTTP API event (payload 2.0), or with ``function_url`` a Function URL's (same shape)."""
    sent = {"content-type": "application/json", "user-agent": "curl/8.5.0"}
    sent.update({name.lower(): value for name, value in (headers or {}).items()})
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    if text is not None and base64_body:
        text = base64.b64encode(text.encode()).decode()
    api = "abcdefghijklmnopqrstuvwxyz012345" if function_url else "r3pmxmplak"
    domain = (
        f"{api}.lambda-url.us-east-1.on.aws" if function_url else f"{api}.execute-api.us-east-1.amazonaws.com"
    )
    key = "$default" if function_url else (route or f"{method} {path}")
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": key,
        "rawPath": path,
        "rawQueryString": "",
        "headers": sent,
        "requestContext": {
            "accountId": "anonymous" if function_url else ACCOUNT,
            "apiId": api,
            "domainName": domain,
            "domainPrefix": api,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "198.51.100.7",
                "userAgent": "curl/8.5.0",
            },
            "requestId": f"{uuid.uuid4().hex[:14]}=",
            "routeKey": key,
            "stage": "$default",
            "time": "27/Nov/2026:17:00:00 +0000",
            "timeEpoch": 1795798800000,
        },
        "isBase64Encoded": base64_body,
    }
    if text is not None:
        event["body"] = text
    if path_parameters is not None and not function_url:
        event["pathParameters"] = path_parameters
    return event
