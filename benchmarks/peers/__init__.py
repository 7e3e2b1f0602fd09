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
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.counting import backend_calls
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import RESULTS, interleave_samples, paired_ratio, summarize
from benchmarks.core_overhead import SQLITE_WARMUP
from benchmarks.peers.dbos import dbos_variants
from benchmarks.peers.powertools import (
    DUPLICATES,
    KEYS_COUNTED,
    count_first_and_duplicates,
    powertools_variants,
)


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
        from idemflow.testing.servers import moto_server

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
