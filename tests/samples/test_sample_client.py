"""The samples' HTTP client: retries what a server could not answer, reports what it answered.

A server that fails with a plain-text 500 (an unhandled exception) must show up in the load's
answers, where the checks report it, not crash the load generator with a JSON error. A 503 is
sent again, with the same key, to the next server.
"""

from __future__ import annotations

import httpx

from samples import _harness


def client_of(handler: httpx.MockTransport, urls: list[str]) -> _harness.HttpClient:
    client = _harness.HttpClient(urls, patience=5.0)
    mocked = httpx.Client(transport=handler)
    client._client = lambda: mocked  # type: ignore[method-assign]
    return client


def test_a_plain_text_server_error_is_an_answer_not_a_crash() -> None:
    client = client_of(
        httpx.MockTransport(lambda request: httpx.Response(500, text="Internal Server Error")), ["http://a"]
    )
    answer = client.request("POST", "/x", key="k1", body={})
    assert answer.status == 500 and answer.body == {"error": "not_json", "detail": "Internal Server Error"}


def test_an_unavailable_server_is_retried_on_the_next_with_the_same_key() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers["Idempotency-Key"]))
        if len(seen) < 3:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json={"ok": True})

    client = client_of(httpx.MockTransport(handler), ["http://a", "http://b"])
    answer = client.request("POST", "/x", key="k2", body={})
    assert answer.status == 200 and answer.body == {"ok": True}
    assert [key for _, key in seen] == ["k2"] * 3
    assert {host for host, _ in seen} == {"a", "b"}
    assert client.retries == 2 and client.sent == 1
