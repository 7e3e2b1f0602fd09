"""The 2-step survey workflow on moto (DynamoDB) and Azurite (Azure Tables):
idemflow against hand-written SDK code doing the same writes, side by side.

Baselines (the project's cost targets compare against them):
- plain: what a careful engineer writes without idempotence;
- minimal exactly-once: each step one transactional write carrying its data and a memo row
  (the run record riding in the first where the backend allows) — the physical limit.

Reports calls per workflow on the caller's path and median latency ratios. Emulator latencies
are not cloud latencies (moto deep-copies tables on every transaction); read the ratios.

Run: ``python -m benchmarks.cloud_survey`` (starts moto server and Azurite on loopback).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common.counting import backend_calls
from benchmarks.common.report import ratio_headline, write_record
from benchmarks.common.stats import RESULTS, environment, interleave_samples, paired_ratio, summarize, write
from benchmarks.common.two_step_survey import survey
from idemflow import run
from idemflow.stores import Store
from idemflow.testing.servers import azurite_server, moto_server


class Counted:
    """Counts SDK calls a baseline makes (the stores count their own)."""

    def __init__(self) -> None:
        self.calls = 0


def dynamodb_variants(endpoint: str, region: str) -> tuple[dict[str, Callable[[int], None]], dict[str, Any]]:
    import boto3

    from idemflow.stores.dynamodb import DynamoDBStore

    prefix = f"b{uuid.uuid4().hex[:6]}"
    store = DynamoDBStore(endpoint_url=endpoint, region_name=region, prefix=prefix + "i")
    store.create_tables("responses", "summaries")
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region)
    for variant in ("p", "m"):
        for table in ("responses", "summaries", "runs"):
            client.create_table(
                TableName=f"{prefix}{variant}{table}",
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
    counters = {"plain": Counted(), "minimal": Counted()}

    def plain(i: int) -> None:
        client.put_item(
            TableName=f"{prefix}presponses",
            Item={"pk": {"S": "s1"}, "sk": {"S": f"u{i}"}, "v": {"S": '"yes"'}},
        )
        client.update_item(
            TableName=f"{prefix}psummaries",
            Key={"pk": {"S": "s1"}, "sk": {"S": "yes"}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        counters["plain"].calls += 2

    def minimal(i: int) -> None:
        absent = "attribute_not_exists(pk)"
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": f"{prefix}mresponses",
                        "Item": {"pk": {"S": "s1"}, "sk": {"S": f"du{i}"}, "v": {"S": '"yes"'}},
                    }
                },
                {
                    "Put": {
                        "TableName": f"{prefix}mresponses",
                        "Item": {"pk": {"S": "s1"}, "sk": {"S": f"mq{i}|1"}, "v": {"S": "null"}},
                        "ConditionExpression": absent,
                    }
                },
                {
                    "Put": {
                        "TableName": f"{prefix}mruns",
                        "Item": {"pk": {"S": f"q{i}"}, "sk": {"S": "r"}, "v": {"S": "fp"}},
                        "ConditionExpression": absent,
                    }
                },
            ]
        )
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": f"{prefix}msummaries",
                        "Key": {"pk": {"S": "s1"}, "sk": {"S": "dyes"}},
                        "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
                {
                    "Put": {
                        "TableName": f"{prefix}msummaries",
                        "Item": {"pk": {"S": "s1"}, "sk": {"S": f"mq{i}|2"}, "v": {"S": "null"}},
                        "ConditionExpression": absent,
                    }
                },
            ]
        )
        counters["minimal"].calls += 2

    def idem(i: int) -> None:
        run(survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    return {"plain": plain, "minimal exactly-once": minimal, "idemflow": idem}, {"store": store, **counters}


def azure_variants(connection_string: str) -> tuple[dict[str, Callable[[int], None]], dict[str, Any]]:
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceNotFoundError
    from azure.data.tables import TableServiceClient, UpdateMode

    from idemflow.stores.azure_tables import AzureTableStore

    prefix = f"b{uuid.uuid4().hex[:6]}"
    store = AzureTableStore(connection_string=connection_string, prefix=prefix + "i")
    store.create_tables("responses", "summaries")
    service = TableServiceClient.from_connection_string(connection_string)
    tables = {
        name: service.create_table(f"{prefix}{name}") for name in ("presp", "psum", "mresp", "msum", "mruns")
    }
    counters = {"plain": Counted(), "minimal": Counted()}

    def bump(table: Any, extra: list[tuple[str, Any]] | None) -> int:
        """Read the counter, write it back under its ETag (Azure has no server-side add)."""
        try:
            entity = table.get_entity("s1", "yes")
            op: tuple[Any, ...] = (
                "update",
                {"PartitionKey": "s1", "RowKey": "yes", "n": entity["n"] + 1},
                {
                    "mode": UpdateMode.REPLACE,
                    "etag": entity.metadata["etag"],
                    "match_condition": MatchConditions.IfNotModified,
                },
            )
        except ResourceNotFoundError:
            op = ("create", {"PartitionKey": "s1", "RowKey": "yes", "n": 1})
        if extra is None:
            if op[0] == "create":
                table.create_entity(op[1])
            else:
                table.update_entity(op[1], **op[2])
        else:
            table.submit_transaction([op, *extra])
        return 2

    def plain(i: int) -> None:
        tables["presp"].upsert_entity({"PartitionKey": "s1", "RowKey": f"u{i}", "v": "yes"})
        counters["plain"].calls += 1 + bump(tables["psum"], None)

    def minimal(i: int) -> None:
        tables["mruns"].create_entity({"PartitionKey": f"q{i}", "RowKey": "r", "v": "fp"})
        tables["mresp"].submit_transaction(
            [
                ("upsert", {"PartitionKey": "s1", "RowKey": f"du{i}", "v": "yes"}),
                ("create", {"PartitionKey": "s1", "RowKey": f"mq{i}-1", "v": "null"}),
            ]
        )
        counters["minimal"].calls += 2 + bump(
            tables["msum"], [("create", {"PartitionKey": "s1", "RowKey": f"mq{i}-2", "v": "null"})]
        )

    def idem(i: int) -> None:
        run(survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    return {"plain": plain, "minimal exactly-once": minimal, "idemflow": idem}, {"store": store, **counters}


def report(
    backend: str,
    variants: dict[str, Callable[[int], None]],
    extra: dict[str, Any],
    rounds: int,
    per_round: int,
    headlines: dict[str, Any] | None = None,
) -> list[str]:
    store: Store = extra["store"]
    before = backend_calls(store)
    samples = interleave_samples(variants, rounds, per_round)
    results = {name: summarize(name, values) for name, values in samples.items()}
    store.flush()
    runs = rounds * per_round
    calls = {
        "plain": extra["plain"].calls / runs,
        "minimal exactly-once": extra["minimal"].calls / runs,
        "idemflow": (backend_calls(store) - before) / runs,
    }
    minimal, plain = results["minimal exactly-once"].median, results["plain"].median
    lines = [
        f"## {backend}",
        "",
        "| variant | calls/workflow | median ms | IQR ms | / minimal | / plain |",
        "|---|---|---|---|---|---|",
    ]
    for name, summary in results.items():
        note = " (incl. 1 off-path completion write)" if name == "idemflow" else ""
        lines.append(
            f"| {name} | {calls[name]:.2f}{note} | {summary.median * 1e3:.2f} | {summary.spread * 1e3:.2f} | "
            f"{summary.median / minimal:.2f} | {summary.median / plain:.2f} |"
        )
    over_minimal = paired_ratio("x", samples["idemflow"], samples["minimal exactly-once"])
    over_plain = paired_ratio("x", samples["idemflow"], samples["plain"])
    lines += [
        "",
        f"Paired per-round ratios (median, IQR): idemflow / minimal {over_minimal.median:.2f} "
        f"({over_minimal.q1:.2f}–{over_minimal.q3:.2f}), idemflow / plain {over_plain.median:.2f} "
        f"({over_plain.q1:.2f}–{over_plain.q3:.2f}).",
    ]
    if headlines is not None:
        key = "cloud.moto" if "moto" in backend else "cloud.azurite"
        headlines[f"{key}.idemflow_over_minimal"] = ratio_headline(over_minimal, backend)
        headlines[f"{key}.idemflow_over_plain"] = ratio_headline(over_plain, backend)
        headlines[f"{key}.calls"] = {
            "value": {k: round(v, 2) for k, v in calls.items()},
            "note": "per workflow",
        }
    return [*lines, ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    started = time.time()
    headlines: dict[str, Any] = {}
    lines = ["# 2-step survey workflow on the emulators", "", environment(), ""]
    with moto_server() as moto:
        variants, extra = dynamodb_variants(moto.endpoint, moto.region)
        lines += report("DynamoDB (moto server)", variants, extra, args.rounds, args.per_round, headlines)
        extra["store"].close()
    with azurite_server() as azurite:
        variants, extra = azure_variants(azurite.connection_string)
        lines += report("Azure Tables (Azurite)", variants, extra, args.rounds, args.per_round, headlines)
        extra["store"].close()
    text = "\n".join(lines)
    print(text)
    write("cloud_survey.md", text, args.out)
    params = {"rounds": args.rounds, "per round": args.per_round}
    write_record(
        "cloud_survey",
        "2-step survey workflow on the emulators",
        params,
        headlines,
        args.out or RESULTS,
        started,
    )


if __name__ == "__main__":
    main()
