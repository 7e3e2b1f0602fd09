"""idemflow beside what a user would use instead, on the same workload and machine.

**DBOS Transact on SQLite.** A 2-step workflow (record a response, count it)
where each step is a DBOS datasource transaction on a SQLite application
database, DBOS's system database also SQLite; against two plain SQLite
transactions and against idemflow's ``SqliteStore``. Every file is in WAL
mode with ``synchronous=FULL`` (set on the files before DBOS opens them:
SQLite keeps WAL in the file, and FULL is the default), so all three pay the
same durability.

**AWS Lambda Powertools idempotency on moto.** A handler doing the same
``PutItem`` + ``UpdateItem ADD``: bare; wrapped in Powertools'
``idempotent_function`` with ``DynamoDBPersistenceLayer`` (an in-progress
record before the handler, the result after; it protects the whole call,
not each step); the same handler wrapped in idemflow's ``idempotent_function``
(the plain-function twin of Powertools', on ``DynamoDBStore``: the call is
memoized, not each write); and as a 2-step idemflow workflow on
``DynamoDBStore`` — all on the same moto server. Calls are counted per first
call and per duplicate (an already-answered key) for each. moto charges a ``TransactWriteItems`` (what an
atomic step needs) about 6× a ``PutItem``, so the idemflow/bare ratio here
is the emulator's, not DynamoDB's; the call counts are the backend-neutral
comparison.

Variants interleaved by round; ratios are medians of per-round ratios.

Run: ``python -m benchmarks peers [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import uuid
import warnings
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks._backends import boto_config, create_dynamodb_table, plain_sqlite, prewarm_sqlite
from benchmarks._counting import backend_calls
from benchmarks._report import Report, fmt_ratio
from benchmarks._stats import RESULTS, interleave_samples, paired_ratio, summarize
from benchmarks.core_overhead import SQLITE_WARMUP
from idemflow import Idem, SqliteStore, Tx, atomic, idempotent_function, run, workflow


def _record(response: dict[str, Any]) -> Callable[[Tx], None]:
    def record(tx: Tx) -> None:
        tx.put(response["user"], response["answer"])

    return record


def _count(answer: str) -> Callable[[Tx], None]:
    def count(tx: Tx) -> None:
        tx.increment(answer)

    return count


@workflow("peer_survey")
def peer_survey(response: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
    """The 2-step workflow every peer runs: record a response, count it."""
    yield atomic("responses", response["survey"], _record(response))
    yield atomic("summaries", response["survey"], _count(response["answer"]))
    return "ok"


SCHEMA = [
    "CREATE TABLE responses (survey TEXT, id TEXT, answer TEXT, PRIMARY KEY (survey, id))",
    "CREATE TABLE summaries (survey TEXT, option TEXT, n INTEGER, PRIMARY KEY (survey, option))",
]
INSERT = "INSERT INTO responses VALUES ('s1', ?, 'yes')"
COUNT = "INSERT INTO summaries VALUES ('s1', 'yes', 1) ON CONFLICT (survey, option) DO UPDATE SET n = n + 1"


def dbos_variants(folder: Path) -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """Plain SQLite, DBOS and idemflow; returns the variants and a cleanup."""
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig, SetWorkflowID, SQLAlchemyDatasource

    for name in ("dbos-system.sqlite3", "dbos-app.sqlite3", "idemflow.sqlite3"):
        prewarm_sqlite(folder / name)  # WAL mode (kept in the file) and steady-state size
    logging.getLogger("dbos").setLevel(logging.WARNING)
    config: DBOSConfig = {
        "name": "idemflow-bench",
        "system_database_url": f"sqlite:///{folder / 'dbos-system.sqlite3'}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    source = SQLAlchemyDatasource.create(f"sqlite:///{folder / 'dbos-app.sqlite3'}")
    with source.engine.begin() as conn:
        for statement in SCHEMA:
            conn.execute(sa.text(statement))

    @source.transaction()
    def record(i: int) -> None:
        source.sql_session().execute(sa.text(INSERT.replace("?", ":id")), {"id": f"u{i}"})

    @source.transaction()
    def count() -> None:
        source.sql_session().execute(sa.text(COUNT))

    @DBOS.workflow()
    def dbos_survey(i: int) -> str:
        record(i)
        count()
        return "ok"

    DBOS.launch()
    plain = plain_sqlite(folder / "plain.sqlite3")
    for statement in SCHEMA:
        plain.execute(statement)
    store = SqliteStore(folder / "idemflow.sqlite3")

    def baseline(i: int) -> None:
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(INSERT, (f"u{i}",))
        plain.execute("COMMIT")
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(COUNT)
        plain.execute("COMMIT")

    def with_dbos(i: int) -> None:
        with SetWorkflowID(f"w{i}"):
            dbos_survey(i)

    def idem(i: int) -> None:
        run(peer_survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    def cleanup() -> None:
        store.close()
        plain.close()
        DBOS.destroy(destroy_registry=True)

    return {"plain SQLite": baseline, "DBOS": with_dbos, "idemflow": idem}, cleanup


def powertools_variants(
    endpoint: str, region: str
) -> tuple[dict[str, Callable[[int], None]], dict[str, Any]]:
    import boto3
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
    )
    from aws_lambda_powertools.utilities.idempotency import (
        idempotent_function as powertools_idempotent_function,
    )

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
    bare_client.create_table(
        TableName=prefix + "idempotency",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    calls["bare"] = 0  # table creation is not a request

    def handler(client: Any, table: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def handle(event: dict[str, Any]) -> dict[str, Any]:
            client.put_item(
                TableName=f"{prefix}{table}responses",
                Item={"pk": {"S": "s1"}, "sk": {"S": event["user"]}, "v": {"S": '"yes"'}},
            )
            client.update_item(
                TableName=f"{prefix}{table}summaries",
                Key={"pk": {"S": "s1"}, "sk": {"S": "yes"}},
                UpdateExpression="ADD n :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )
            return {"status": "ok"}

        return handle

    bare = handler(bare_client, "b")
    # Outside Lambda there is no remaining time to register; Powertools warns on every call.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
    persistence = DynamoDBPersistenceLayer(table_name=prefix + "idempotency", boto3_client=pt_client)
    protected_handler = handler(pt_client, "p")

    @powertools_idempotent_function(  # type: ignore[untyped-decorator]
        data_keyword_argument="event",
        persistence_store=persistence,
        config=IdempotencyConfig(event_key_jmespath="id"),
    )
    def protected(event: dict[str, Any]) -> dict[str, Any]:
        return protected_handler(event)

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


def _latency_table(report: Report, samples: dict[str, list[float]], baseline: str) -> None:
    rows = []
    for name, values in samples.items():
        summary = summarize(name, values)
        rows.append(
            [
                name,
                f"{summary.median * 1e3:.3f}",
                f"{summary.spread * 1e3:.3f}",
                fmt_ratio(paired_ratio("x", values, samples[baseline])),
            ]
        )
    report.table(["variant", "median ms", "IQR ms", f"/ {baseline}"], rows)


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks peers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3 if quick else 9)
    parser.add_argument("--per-round", type=int, default=5 if quick else 20)
    parser.add_argument("--skip", default="", help="comma-separated: dbos,powertools")
    args = parser.parse_args(argv)
    skip = set(args.skip.split(","))
    warmup = 20 if quick else SQLITE_WARMUP
    report = Report(
        "peers",
        "idemflow beside DBOS Transact and AWS Lambda Powertools",
        {
            "rounds": args.rounds,
            "requests per variant per round": args.per_round,
            "SQLite warm-up per variant": 20 if quick else SQLITE_WARMUP,
        },
        out,
    )
    if "dbos" not in skip:
        folder = Path(tempfile.mkdtemp(prefix="idemflow-bench-dbos-"))
        variants, cleanup = dbos_variants(folder)
        try:
            samples = interleave_samples(variants, args.rounds, args.per_round, warmup=warmup)
        finally:
            cleanup()
        dbos = paired_ratio("x", samples["DBOS"], samples["plain SQLite"])
        idem = paired_ratio("x", samples["idemflow"], samples["plain SQLite"])
        versus = paired_ratio("x", samples["idemflow"], samples["DBOS"])
        report.add("## DBOS Transact on SQLite: 2-step workflow, each step a transaction", "")
        _latency_table(report, samples, "plain SQLite")
        report.add(f"idemflow / DBOS: **{fmt_ratio(versus)}**.", "")
        report.headline("peers.dbos_over_plain", dbos, note="DBOS / two plain SQLite transactions")
        report.headline("peers.idemflow_over_plain_sqlite", idem, note="idemflow / plain, same run")
        report.headline("peers.idemflow_over_dbos", versus, note="SQLite, 2-step workflow")
        print(f"  peers DBOS/plain {dbos.median:.2f}, idemflow/plain {idem.median:.2f}", flush=True)
    if "powertools" not in skip:
        from tests.servers import moto_server

        with moto_server() as moto:
            variants, extra = powertools_variants(moto.endpoint, moto.region)
            calls = extra["calls"]
            try:
                before = backend_calls(extra["store"])
                fn_before = backend_calls(extra["fn_store"])
                samples = interleave_samples(variants, args.rounds, args.per_round)
                bare_calls = calls["bare"] - 2 * args.rounds * args.per_round  # the calibration calls
                pt_calls = calls["Powertools"]
                extra["store"].flush()
                extra["fn_store"].flush()
                trips = backend_calls(extra["store"]) - before
                fn_trips = calls["idemflow function handler"] + backend_calls(extra["fn_store"]) - fn_before
                per_call = count_first_and_duplicates(extra)
            finally:
                extra["store"].close()
                extra["fn_store"].close()
                for client in extra["clients"]:
                    client.close()
        n = args.rounds * args.per_round
        pt = paired_ratio("x", samples["Powertools"], samples["bare handler"])
        idem = paired_ratio("x", samples["idemflow"], samples["bare handler"])
        versus = paired_ratio("x", samples["idemflow"], samples["Powertools"])
        function = paired_ratio("x", samples["idemflow idempotent_function"], samples["Powertools"])
        report.add("## AWS Lambda Powertools idempotency on moto: PutItem + UpdateItem ADD", "")
        _latency_table(report, samples, "bare handler")
        report.add(
            f"Calls per request: bare {bare_calls / n:.2f}, Powertools {pt_calls / n:.2f}, "
            f"idemflow idempotent_function {fn_trips / n:.2f}, idemflow workflow {trips / n:.2f} "
            "(each idemflow count includes the off-path completion record).",
            "",
            f"**idemflow `idempotent_function` / Powertools `idempotent_function`: {fmt_ratio(function)}** "
            "(the same handler, each protecting the whole call).",
            "",
            "Backend calls of a first call and of each duplicate (a key already answered), counted "
            f"on {KEYS_COUNTED} keys with {DUPLICATES} duplicates each, the handler's own two writes "
            "included:",
            "",
        )
        report.table(
            ["decorated", "first call", "each duplicate"],
            [[name, f"{c['first call']:.2f}", f"{c['duplicate']:.2f}"] for name, c in per_call.items()],
        )
        report.add(
            f"idemflow / Powertools: **{fmt_ratio(versus)}**. Powertools protects the whole call (a retry",
            "after a crash between the two writes re-runs both); idemflow protects each step.",
            "",
        )
        emulator = paired_ratio("x", samples["moto TransactWriteItems (1 put)"], samples["moto PutItem"])
        report.add(
            f"The emulator's tax: one TransactWriteItems / one PutItem on this moto server: "
            f"{fmt_ratio(emulator)} (each idemflow step is one TransactWriteItems).",
            "",
        )
        report.headline("peers.moto_transact_over_put", emulator, note="emulator cost of a transaction")
        report.headline("peers.powertools_over_bare", pt, note="moto server")
        report.headline("peers.idemflow_over_bare_moto", idem, note="moto server, same run")
        report.headline("peers.idemflow_over_powertools", versus, note="moto server")
        report.headline(
            "peers.idemflow_function_over_powertools",
            function,
            note="idempotent_function / Powertools' idempotent_function, same handler, moto server",
        )
        report.headline(
            "peers.function_calls",
            {f"{name} {what}": value for name, c in per_call.items() for what, value in c.items()},
            note="backend calls per first call and per duplicate",
        )
        report.headline(
            "peers.powertools_calls",
            {"bare": bare_calls / n, "Powertools": pt_calls / n, "idemflow": trips / n},
        )
        print(
            f"  peers Powertools/bare {pt.median:.2f}, idemflow/bare {idem.median:.2f}, "
            f"idempotent_function/Powertools {function.median:.2f}; calls {per_call}",
            flush=True,
        )
    report.write()
    return report
