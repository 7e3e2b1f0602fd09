"""Calls chosen to test the request-unit rules of :mod:`benchmarks.cost.units` against DynamoDB
Local's own ``ConsumedCapacity``: item sizes on both sides of the 1 KB boundary (strings,
numbers, booleans, lists, maps), an item replaced by a smaller one, reads of every consistency,
transactions of one and of several items, and writes to a table with a sparse global secondary
index like idemflow's runs table.

The page's section comparing both (:func:`capacity_section`) is written here too.

Why apart: these are not requests of any variant; they run once, on tables of their own, so that
the page can say where the formula and the emulator agree, and where (and why) they do not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common.backends import Backend, boto_config, create_dynamodb_table
from benchmarks.common.report import Report
from benchmarks.cost.meter import Check, DynamoMeter
from benchmarks.cost.rounds import Result, Variant
from benchmarks.cost.units import item_size


@dataclass(frozen=True)
class Case:
    what: str
    check: Check


def _padded(size: int, sort: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """An item ``sort`` of exactly ``size`` bytes (by :func:`item_size`): ``extra`` plus padding."""
    item: dict[str, Any] = {"pk": {"S": "cal"}, "sk": {"S": sort}, **(extra or {}), "p": {"S": ""}}
    item["p"] = {"S": "x" * (size - item_size(item))}
    assert item_size(item) == size
    return item


def calibrate(backend: Backend) -> list[Case]:
    """Run the calibration calls on ``backend`` (DynamoDB Local) and pair each with its units."""
    import boto3

    setup = backend.dynamodb
    endpoint, region = setup.meta.endpoint_url, setup.meta.region_name

    def client() -> Any:
        return boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())

    peek, calls = client(), client()
    meter = DynamoMeter(peek)
    meter.attach(calls, capacity=True)
    table, indexed = backend.tag("cal"), backend.tag("calg")
    create_dynamodb_table(setup, table)
    setup.create_table(
        TableName=indexed,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "open")],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "open",
                "KeySchema": [
                    {"AttributeName": "open", "KeyType": "HASH"},
                    {"AttributeName": "pk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    mixed = {
        "n": {"N": "12345.678900"},
        "b": {"BOOL": True},
        "l": {"L": [{"S": "ab"}, {"N": "7"}]},
        "m": {"M": {"k": {"S": "v"}, "z": {"NULL": True}}},
    }
    key = {"pk": {"S": "cal"}, "sk": {"S": "a"}}
    cases: list[Case] = []
    meter.metering = True

    def case(what: str, call: Callable[[], Any]) -> None:
        before = len(meter.checks)
        call()
        cases.extend(Case(what, found) for found in meter.checks[before:])

    def put(item: dict[str, Any], into: str = table) -> Callable[[], Any]:
        return lambda: calls.put_item(TableName=into, Item=item)

    def transact(*items: dict[str, Any]) -> Callable[[], Any]:
        return lambda: calls.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": i}} for i in items]
        )

    try:
        case("PutItem, item of 1,024 bytes (strings)", put(_padded(1024, "a")))
        case("PutItem, item of 1,025 bytes (strings)", put(_padded(1025, "b")))
        case("PutItem, 1,024 bytes with number, bool, list, map", put(_padded(1024, "c", mixed)))
        case("PutItem, 1,025 bytes with number, bool, list, map", put(_padded(1025, "d", mixed)))
        case("PutItem replacing the 1,025-byte item by a small one", put({**key, "sk": {"S": "b"}}))
        case(
            "UpdateItem ADD on a new item",
            lambda: calls.update_item(
                TableName=table,
                Key={"pk": {"S": "cal"}, "sk": {"S": "n"}},
                UpdateExpression="ADD n :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            ),
        )
        case(
            "GetItem, strongly consistent",
            lambda: calls.get_item(TableName=table, Key=key, ConsistentRead=True),
        )
        case("GetItem, eventually consistent", lambda: calls.get_item(TableName=table, Key=key))
        case(
            "GetItem of an absent item",
            lambda: calls.get_item(TableName=table, Key={**key, "sk": {"S": "none"}}, ConsistentRead=True),
        )
        case(
            "BatchGetItem, two items, strongly consistent",
            lambda: calls.batch_get_item(
                RequestItems={table: {"Keys": [key, {**key, "sk": {"S": "n"}}], "ConsistentRead": True}}
            ),
        )
        case("TransactWriteItems, one 1 KB item", transact(_padded(600, "t1")))
        case(
            "TransactWriteItems, a 1 KB and a 2 KB item",
            transact(_padded(600, "t2"), _padded(1500, "t3")),
        )
        case(
            "TransactWriteItems, two 1 KB items",
            transact(_padded(600, "t4"), _padded(700, "t5")),
        )
        case(
            "TransactWriteItems, three 1 KB items",
            transact(*(_padded(500, f"t{n}") for n in (6, 7, 8))),
        )
        opened = {"pk": {"S": "run"}, "sk": {"S": "r1"}, "open": {"S": "wf"}}
        case("PutItem creating an index entry (sparse GSI, ALL)", put(opened, indexed))
        case(
            "UpdateItem removing the indexed attribute",
            lambda: calls.update_item(
                TableName=indexed,
                Key={"pk": {"S": "run"}, "sk": {"S": "r1"}},
                UpdateExpression="SET v = :v REMOVE #o",
                ExpressionAttributeNames={"#o": "open"},
                ExpressionAttributeValues={":v": {"S": "done"}},
            ),
        )
        case(
            "TransactWriteItems creating an index entry",
            lambda: calls.transact_write_items(
                TransactItems=[{"Put": {"TableName": indexed, "Item": {**opened, "sk": {"S": "r2"}}}}]
            ),
        )
        case("PutItem without the indexed attribute", put({"pk": {"S": "run"}, "sk": {"S": "r3"}}, indexed))
    finally:
        meter.metering = False
        calls.close()
        peek.close()
    return cases


def _checks(variants: list[Variant], results: dict[str, Result]) -> list[list[str]]:
    """Per variant and operation: calls cross-checked, agreeing, and explained by Local's rule."""
    table = []
    for variant in variants:
        grouped: dict[str, list[Check]] = {}
        for check in results[variant.key].checks:
            grouped.setdefault(check.operation, []).append(check)
        for operation, checks in grouped.items():
            agree = sum(abs(c.computed - c.answered) < 1e-9 for c in checks)
            explained = sum(abs(c.local_rule - c.answered) < 1e-9 for c in checks)
            computed = Counter(f"{c.computed:g}→{c.answered:g}" for c in checks)
            table.append(
                [
                    f"{variant.backend}: {variant.name}",
                    operation,
                    str(len(checks)),
                    str(agree),
                    str(explained),
                    ", ".join(f"{pair} ×{n}" for pair, n in sorted(computed.items())),
                ]
            )
    return table


def capacity_section(
    report: Report, variants: list[Variant], results: dict[str, Result], calibration: list[Case]
) -> None:
    """The page's section on request units against DynamoDB Local's ``ConsumedCapacity``: each
    variant's calls cross-checked in the metering pass, and the calibration calls."""
    checks = _checks(variants, results)
    if checks or calibration:
        report.add(
            "## Request units against DynamoDB Local's ConsumedCapacity",
            "",
            "The hand-written variants' calls asked for `ReturnConsumedCapacity='TOTAL'` in the metering",
            "pass (idemflow's and Powertools' calls were left as they are). *agree*: the documented rules",
            "give Local's number; *Local's rule*: Local's number is what it observably computes for a",
            "transaction (per table, twice the sum of the *distinct* per-item KB counts: two 1 KB items",
            "count 2, not 4; index writes twice), which the documented rules (2 per KB per item) do not.",
            "",
        )
        if checks:
            header = ["variant", "operation", "calls", "agree", "explained by Local's rule", "computed→Local"]
            report.table(header, checks)
        if calibration:
            report.add("Calibration calls (tables of their own):", "")
            report.table(
                ["call", "computed", "DynamoDB Local", "agree", "Local's rule"],
                [
                    [
                        c.what,
                        f"{c.check.computed:g}",
                        f"{c.check.answered:g}",
                        "yes" if abs(c.check.computed - c.check.answered) < 1e-9 else "**no**",
                        f"{c.check.local_rule:g}",
                    ]
                    for c in calibration
                ],
            )
