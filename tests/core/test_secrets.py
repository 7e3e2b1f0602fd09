"""No secret shows up in errors or logs: bad store and queue URLs, wrong keys, missing SDKs.

Split from :mod:`tests.core.test_security` (hostile names, values and messages).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest

from idemflow import (
    ConfigurationError,
    IdemflowError,
    atomic,
    open_store,
    run,
)
from idemflow.testing.servers import AZURITE_KEY, Azurite, Moto
from idemflow.worker import open_queue

# -- secrets --------------------------------------------------------------------------------------

SECRET = "S3cr3tK3yQ7w9Zx2Lm4Np8Rt"
"""A fixed fake secret (test ids must be the same in every pytest-xdist worker)."""


@pytest.mark.parametrize(
    "url",
    [
        f"azur:?connection_string=AccountKey={SECRET}",
        f"connection_string=AccountKey={SECRET}",
        f"azure:?connection_string=AccountKey%3D{SECRET}",
        f"azure:?connection_string=DefaultEndpointsProtocol=http;AccountName=a;AccountKey={SECRET}",
        f"sqlite:?key={SECRET}",
    ],
    ids=["unknown scheme", "no scheme", "escaped key", "partial connection string", "sqlite query"],
)
def test_bad_store_urls_never_show_the_secret(url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        try:
            store = open_store(url)
        except IdemflowError as exc:
            assert SECRET not in str(exc) and SECRET not in repr(exc)
        else:  # accepted as configuration (nothing is contacted yet): it must not show it either
            assert SECRET not in repr(store) and SECRET not in str(vars(store).get("prefix", ""))
            store.close()
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        f"azur-queue:jobs?connection_string=AccountKey={SECRET}",
        f"azure-queue:jobs?connection_string=AccountKey={SECRET}&visibility_timeout=x",
        f"azure-queue:jobs?connection_string=AccountKey={SECRET}",
        f"sqs:jobs?endpoint=http://user:{SECRET}@127.0.0.1:1&visibility_timeout=soon",
    ],
    ids=["unknown scheme", "bad option", "malformed connection string", "credentials in endpoint"],
)
def test_bad_queue_urls_never_show_the_secret(url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as caught:
        open_queue(url)
    assert SECRET not in str(caught.value) and SECRET not in caplog.text


CONNECTION_STRING = (
    f"DefaultEndpointsProtocol=http;AccountName=a;AccountKey={SECRET};QueueEndpoint=http://h:1/a"
)
"""A whole connection string: it has a ':' (in an endpoint), so it looks like 'scheme:rest'."""

URL_ERRORS = [
    # (opener, url, scheme shown or None, what the error says): every error path of open_store and
    # open_queue, and the errors of the constructors they call with what the URL gave
    ("store", CONNECTION_STRING, None, "unknown scheme"),
    ("store", f"AccountKey={SECRET}", None, "unknown scheme"),
    ("store", f"{SECRET}:x", None, "unknown scheme"),  # shown only if short and lowercase, like a scheme
    ("store", f"{SECRET.lower()}:x", None, "unknown scheme"),
    ("store", f"azur:?connection_string=AccountKey={SECRET}", "azur", "unknown scheme"),
    ("store", f"sqlite:?key={SECRET}", "sqlite", "unknown parameter(s) ['key']"),
    ("store", f"sqlite:?connection_string={SECRET}", "sqlite", "unknown parameter"),
    ("store", f"sqlite:?{SECRET}", "sqlite", "['<not a name=value pair>']"),
    ("store", f"sqlite:?AccountKey%3D{SECRET}=x", "sqlite", "['<not a name=value pair>']"),
    ("store", "sqlite:", "sqlite", "needs a path"),
    ("store", f"sqlite://user:{SECRET}@host/db", "sqlite", "must not carry credentials"),
    ("store", f"memory:?connection_string={SECRET}", "memory", "unknown parameter"),
    ("store", f"dynamodb:?regoin={SECRET}", "dynamodb", "unknown parameter(s) ['regoin']"),
    (
        "store",
        f"dynamodb:?endpoint=http://key:{SECRET}@127.0.0.1:1",
        "dynamodb",
        "must not carry credentials",
    ),
    ("store", f"dynamodb:?endpoint=http://{SECRET}@127.0.0.1:1", "dynamodb", "must not carry credentials"),
    ("store", f"dynamodb:?endpoint=notaurl{SECRET}&region=r", "dynamodb", "endpoint must be an http"),
    ("store", "dynamodb:?endpoint=&region=r", "dynamodb", "endpoint must be an http"),
    ("store", f"dynamodb:?endpoint=http://h:99999999/{SECRET}", "dynamodb", "endpoint must be an http"),
    ("store", f"dynamodb:?endpoint=http://[::1/{SECRET}", "dynamodb", "endpoint must be an http"),
    ("store", f"dynamodb:?region=r&conflicts=0.1&prefix={SECRET}", "dynamodb", "needs an endpoint"),
    ("store", "dynamodb:?endpoint=http://127.0.0.1:1&region=r&conflicts=2", "dynamodb", "within [0, 1]"),
    ("store", f"dynamodb:?endpoint=http://127.0.0.1:1&conflicts={SECRET}", "dynamodb", "must be a number"),
    ("store", f"azure:?prefix={SECRET}x&connection-string={SECRET}", "azure", "unknown parameter"),
    ("store", "azure:?prefix=p", "azure", "AZURE_STORAGE_CONNECTION_STRING"),
    ("store", f"azure:?connection_string=AccountKey={SECRET}", None, "malformed"),  # the store's own check
    ("queue", CONNECTION_STRING, None, "unknown scheme"),
    ("queue", f"AccountKey={SECRET}", None, "unknown scheme"),
    ("queue", f"azur-queue:jobs?connection_string=AccountKey={SECRET}", "azur-queue", "unknown scheme"),
    ("queue", f"memory:?visibility_timout={SECRET}", "memory", "unknown parameter(s) ['visibility_timout']"),
    ("queue", f"memory:?{SECRET}", "memory", "['<not a name=value pair>']"),
    ("queue", f"memory:?visibility_timeout={SECRET}", "memory", "visibility_timeout must be a number"),
    ("queue", f"sqs:jobs?create={SECRET}", "sqs", "create must be true or false"),
    ("queue", f"sqlite:?name={SECRET}", "sqlite", "needs a path"),
    ("queue", f"sqs:?endpoint=http://u:{SECRET}@127.0.0.1:1", "sqs", "needs a queue name"),
    ("queue", f"sqs://user:{SECRET}@sqs.eu-west-1.amazonaws.com/1/jobs", "sqs", "must not carry credentials"),
    (
        "queue",
        f"sqs:jobs?endpoint=https://u:{SECRET}@127.0.0.1:1",
        "sqs",
        "endpoint must not carry credentials",
    ),
    ("queue", f"sqs:jobs?endpoint=http://h/?token={SECRET}", "sqs", "endpoint must be an http"),
    ("queue", f"sqs:jobs?endpoint=ftp://{SECRET}.example", "sqs", "endpoint must be an http"),
    ("queue", f"azure-queue:jobs?create=1&visibility_timeout={SECRET}", "azure-queue", "must be a number"),
    ("queue", "azure-queue:jobs", "azure-queue", "AZURE_STORAGE_CONNECTION_STRING"),
    ("queue", f"azure-queue:jobs?connection_string=AccountKey={SECRET}", None, "malformed"),  # AzureQueue's
]


@pytest.mark.parametrize(("kind", "url", "scheme", "problem"), URL_ERRORS)
def test_url_errors_name_the_scheme_and_the_problem_never_the_url(
    kind: str, url: str, scheme: str | None, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    opener = open_store if kind == "store" else open_queue
    with pytest.raises(ConfigurationError) as caught:
        opener(url)
    message = str(caught.value)
    assert problem in message
    assert SECRET not in message and SECRET.lower() not in message and SECRET not in repr(caught.value)
    if scheme is not None:
        assert message.startswith(f"{kind} URL '{scheme}:")
    cause = caught.value.__cause__
    assert cause is None or SECRET not in str(cause)  # chained errors are printed with tracebacks


@pytest.mark.parametrize("opener", [open_store, open_queue])
def test_a_url_that_is_not_a_str_is_refused(opener: Callable[[str], object]) -> None:
    with pytest.raises(ConfigurationError, match="URL must be a str, not bytes"):
        opener(f"memory:?{SECRET}".encode())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("opener", "url", "module"),
    [
        (open_store, f"dynamodb:?region=r&prefix={SECRET}", "idemflow.stores.dynamodb"),
        (open_queue, f"sqs:jobs?region={SECRET}&visibility_timeout=3", "idemflow.async_worklist.queues.sqs"),
    ],
)
def test_a_missing_sdk_names_the_extra_not_the_url(
    opener: Callable[[str], object], url: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'idemflow\[aws\]'") as caught:
        opener(url)
    assert SECRET not in str(caught.value) and "jobs" not in str(caught.value)


def test_azure_with_a_wrong_key_never_shows_it(azurite: Azurite, caplog: pytest.LogCaptureFixture) -> None:
    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.worker import AzureQueue

    wrong = AZURITE_KEY[:10] + "Zz" + AZURITE_KEY[12:]
    connection_string = azurite.connection_string.replace(AZURITE_KEY, wrong)
    errors: list[BaseException] = []
    with caplog.at_level(logging.DEBUG):
        store = AzureTableStore(connection_string=connection_string, prefix=f"s{uuid.uuid4().hex[:8]}")
        for action in (
            lambda: store.create_tables("tablea"),
            lambda: run(atomic("tablea", "p", lambda tx: tx.put("k", 1)), request_id="r", store=store),
            lambda: AzureQueue(
                f"q{uuid.uuid4().hex[:8]}", connection_string=connection_string, retry_total=0
            ),
        ):
            with pytest.raises(IdemflowError) as caught:
                action()
            errors.append(caught.value)
        store.close()
    for error in errors:
        for secret in (wrong, wrong[:16], AZURITE_KEY[:16], connection_string):
            assert secret not in str(error) and secret not in repr(error)
    assert wrong[:16] not in caplog.text and AZURITE_KEY[:16] not in caplog.text


def test_dynamodb_errors_and_logs_never_show_the_secret_key(
    moto: Moto, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from idemflow.stores.dynamodb import DynamoDBStore

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    with caplog.at_level(logging.DEBUG):
        store = DynamoDBStore(endpoint_url=moto.endpoint, region_name=moto.region, prefix="nosuch")
        with pytest.raises(IdemflowError) as caught:
            run(atomic("tablea", "p", lambda tx: tx.put("k", 1)), request_id="r", store=store)
        store.close()
    assert SECRET not in str(caught.value) and SECRET not in caplog.text
