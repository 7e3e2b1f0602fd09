"""The AWS Lambda Powertools side of ``peers``: one handler doing ``PutItem`` + ``UpdateItem ADD``
bare, under Powertools' ``idempotent_function``, under idemflow's, and the 2-step survey as an
idemflow workflow, all on one moto server; and the backend calls of a first call and of its
duplicates for each protected variant.

Why apart: the clients, tables, call counters and calibration writes it sets up are Powertools'
comparison alone; ``peers`` only times the variants and writes the page.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from typing import Any

from benchmarks.common.backends import boto_config, create_dynamodb_table
from benchmarks.common.counting import backend_calls
from benchmarks.common.two_step_survey import peer_survey
from idemflow import idempotent_function, run

Handler = Callable[[dict[str, Any]], dict[str, Any]]
"""A handler of an event ``{"id": request key, "user": ...}``."""


def put_and_add(client: Any, responses: str, summaries: str) -> Handler:
    """The handler every variant protects: ``PutItem`` the user's response into ``responses``,
    ``UpdateItem ADD`` its count in ``summaries`` (both keyed ``pk``/``sk``); answers ``ok``.
    ``benchmarks.cost`` runs the same handler."""

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        client.put_item(
            TableName=responses,
            Item={"pk": {"S": "s1"}, "sk": {"S": event["user"]}, "v": {"S": '"yes"'}},
        )
        client.update_item(
            TableName=summaries,
            Key={"pk": {"S": "s1"}, "sk": {"S": "yes"}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return {"status": "ok"}

    return handle


def create_idempotency_table(client: Any, name: str) -> None:
    """The table Powertools' ``DynamoDBPersistenceLayer`` keeps its records in (hash key ``id``)."""
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def powertools_protect(client: Any, table: str, handler: Handler) -> Callable[..., dict[str, Any]]:
    """``handler`` under Powertools' ``idempotent_function`` (``DynamoDBPersistenceLayer`` on
    ``table`` through ``client``, the key the event's ``id``): call it as ``protected(event=...)``."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
    )
    from aws_lambda_powertools.utilities.idempotency import (
        idempotent_function as powertools_idempotent_function,
    )

    # Outside Lambda there is no remaining time to register; Powertools warns on every call.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)

    @powertools_idempotent_function(  # type: ignore[untyped-decorator]
        data_keyword_argument="event",
        persistence_store=persistence,
        config=IdempotencyConfig(event_key_jmespath="id"),
    )
    def protected(event: dict[str, Any]) -> dict[str, Any]:
        return handler(event)

    return protected  # type: ignore[no-any-return]


def powertools_variants(
    endpoint: str, region: str
) -> tuple[dict[str, Callable[[int], None]], dict[str, Any]]:
    import boto3

    from idemflow.stores.dynamodb import DynamoDBStore

    prefix = f"p{uuid.uuid4().hex[:6]}"
    bare_client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())
    pt_client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())
    fn_client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())
    calls = {"bare": 0, "Powertools": 0, "idemflow function handler": 0}

    def counter(name: str) -> Callable[..., None]:
        def count(**_: Any) -> None:
            calls[name] += 1

        return count

    bare_client.meta.events.register("before-call.dynamodb.*", counter("bare"))
    pt_client.meta.events.register("before-call.dynamodb.*", counter("Powertools"))
    fn_client.meta.events.register("before-call.dynamodb.*", counter("idemflow function handler"))
    for table in ("bresponses", "bsummaries", "presponses", "psummaries", "fresponses", "fsummaries"):
        create_dynamodb_table(bare_client, prefix + table)
    create_idempotency_table(bare_client, prefix + "idempotency")
    calls["bare"] = 0  # table creation is not a request

    def handler(client: Any, table: str) -> Handler:
        return put_and_add(client, f"{prefix}{table}responses", f"{prefix}{table}summaries")

    bare = handler(bare_client, "b")
    protected = powertools_protect(pt_client, prefix + "idempotency", handler(pt_client, "p"))

    store = DynamoDBStore(endpoint_url=endpoint, region_name=region, prefix=prefix + "i")
    store.create_tables("responses", "summaries")
    before = backend_calls(store)
    fn_store = DynamoDBStore(endpoint_url=endpoint, region_name=region, prefix=prefix + "f")
    fn_store.create_tables()  # the run-record table only: the memoized call's result lives there
    function_handler = handler(fn_client, "f")

    @idempotent_function(fn_store, key="event.id", name="peer_charge")
    def function_protected(event: dict[str, Any]) -> dict[str, Any]:
        return function_handler(event)

    def bare_call(i: int) -> None:
        bare({"id": f"q{i}", "user": f"u{i}"})

    def powertools_call(i: int) -> None:
        protected(event={"id": f"q{i}", "user": f"u{i}"})

    def idem_function(i: int) -> None:
        function_protected(event={"id": f"q{i}", "user": f"u{i}"})

    def idem(i: int) -> None:
        run(peer_survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    def put_item(i: int) -> None:  # calibration: what moto charges for one write
        bare_client.put_item(
            TableName=f"{prefix}bresponses", Item={"pk": {"S": "cal"}, "sk": {"S": f"p{i}"}, "v": {"S": "1"}}
        )

    def transact_put(i: int) -> None:  # ... and for the same write as a transaction
        bare_client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": f"{prefix}bresponses",
                        "Item": {"pk": {"S": "cal"}, "sk": {"S": f"t{i}"}, "v": {"S": "1"}},
                    }
                }
            ]
        )

    extra: dict[str, Any] = {
        "calls": calls,
        "store": store,
        "fn_store": fn_store,
        "before": before,
        "clients": (bare_client, pt_client, fn_client),
        "first_and_duplicates": {
            "Powertools": powertools_call,
            "idemflow idempotent_function": idem_function,
            "idemflow workflow": idem,
        },
    }
    variants: dict[str, Callable[[int], None]] = {
        "bare handler": bare_call,
        "Powertools": powertools_call,
        "idemflow idempotent_function": idem_function,
        "idemflow": idem,
        "moto PutItem": put_item,
        "moto TransactWriteItems (1 put)": transact_put,
    }
    return variants, extra


KEYS_COUNTED = 3
"""Keys whose first call and duplicates are counted, per variant (counts are deterministic)."""
DUPLICATES = 3
"""Duplicates of each counted key."""


def count_first_and_duplicates(extra: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Backend calls of a first call and of each duplicate, per protected variant.

    Powertools' calls are its client's (the handler's two writes included); the
    ``idempotent_function`` variant's are its handler's client's plus its store's;
    the workflow's are its store's. The stores are flushed before each count
    (the completion record is written in the background).
    """
    calls, store, fn_store = extra["calls"], extra["store"], extra["fn_store"]

    def sent(name: str) -> int:
        store.flush()
        fn_store.flush()
        if name == "Powertools":
            return int(calls["Powertools"])
        if name == "idemflow idempotent_function":
            return int(calls["idemflow function handler"]) + backend_calls(fn_store)
        return backend_calls(store)

    counted: dict[str, dict[str, float]] = {}
    for name, call in extra["first_and_duplicates"].items():
        first = duplicates = 0
        for k in range(KEYS_COUNTED):
            key = 10_000_000 + k  # never one of the timed rounds' keys
            start = sent(name)
            call(key)
            middle = sent(name)
            for _ in range(DUPLICATES):
                call(key)
            first += middle - start
            duplicates += sent(name) - middle
        counted[name] = {
            "first call": first / KEYS_COUNTED,
            "duplicate": duplicates / (KEYS_COUNTED * DUPLICATES),
        }
    return counted
