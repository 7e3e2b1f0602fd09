"""The ``cost`` page: per backend a table of every variant (latency, client CPU, calls on the
caller's path and in all, request units and dollars on DynamoDB, billable transactions on Azure,
transactions and statements or round trips on the SQL stores), the ratios measured in the same
run (on the SQL stores beside issue 45's targets: :mod:`benchmarks.cost.targets`), the cross-check
of the request-unit rules against DynamoDB Local's ``ConsumedCapacity``, the JSON record and the
figure.

Why apart: measuring and presenting change for different reasons; this module only reads results.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import Summary, paired_ratio, percentile
from benchmarks.cost import targets
from benchmarks.cost.calibrate import Case, capacity_section
from benchmarks.cost.figure import figure
from benchmarks.cost.rounds import Result, Variant
from benchmarks.cost.units import USD_PER_MILLION_RRU, USD_PER_MILLION_WRU, Units

LABELS = {
    "dynamodb-local": "DynamoDB (DynamoDB Local 3.3, AWS's engine)",
    "azurite": "Azure Tables (Azurite)",
    "sqlite": "SQLite (WAL, synchronous=FULL)",
    "postgres": "PostgreSQL 15 (fsync on, one server)",
}


NOTES = {
    "dynamodb-local": (
        "WRU/RRU per request, on the caller's path and off it together. A duplicate's cancelled",
        "`TransactWriteItems` is priced as every item failing its condition at the transactional rate",
        "(2 per KB of the item found, at least 2): an assumption (an upper bound), as the sources found",
        "do not price a cancelled transaction. A failed conditional `PutItem` (Powertools' duplicate)",
        "consumes the existing item's size, at least 1 WRU (documented). *of which index*: writes of",
        "the runs table's open-runs index (idemflow's sparse global secondary index).",
    ),
    "azurite": (
        "A failed entity group transaction answers HTTP 202 with the failure inside its body, so only",
        "failed single-entity calls show as *answered 409*; every call is counted, failed or not.",
    ),
    "postgres": (
        "*calls*: round trips of the hand-written code (each step's two statements one query: one",
        "implicit transaction), the idemflow store's own count of its calls (a commit, a read: each one",
        "query in autocommit, so one round trip and one transaction), DBOS's SQLAlchemy transactions",
        "(commits and rollbacks) across its system database and datasource, both on this server; its",
        "statements are SQLAlchemy's cursor executions (a transaction's `BEGIN` and `COMMIT` not among",
        "them). DBOS runs in a process of its own (one DBOS per process): its latency and CPU are that",
        "process's, measured there. One server, fsync on.",
    ),
    "sqlite": (
        "*calls*: transactions (each `BEGIN IMMEDIATE` … `COMMIT`/`ROLLBACK`) of the hand-written code,",
        "the idemflow store's own count of its calls (a commit, a read), DBOS's SQLAlchemy transactions",
        "(commits and rollbacks) across its system and application databases. DBOS runs in a process",
        "of its own (one DBOS per process): its latency and CPU are that process's, measured there.",
    ),
}


HEADLINES = {
    "idemflow / minimal, 1 step": "idemflow_over_minimal.1_step",
    "idemflow / minimal, 2 steps": "idemflow_over_minimal.2_steps",
    "idemflow / minimal, 5 steps": "idemflow_over_minimal.5_steps",
    "idemflow / minimal, 2 steps, duplicate": "idemflow_over_minimal.2_steps_duplicate",
    "idemflow 2 steps / DBOS": "idemflow_over_dbos",
    "idemflow function / Powertools": "function_over_powertools",
}
"""The ratios ``summary.md`` shows (the page has them all)."""


@dataclass
class Row:
    """One variant's numbers, per request."""

    backend: str
    name: str
    family: str
    steps: int
    base: str | None
    p50_ms: float
    p99_ms: float
    cpu_ms: float
    calls_path: float
    calls_all: float
    attempts: float
    wru: float
    rru: float
    index_wru: float
    usd_per_million: float
    ops: dict[str, float] = field(default_factory=dict)
    repeats: int = 0


def rows(variants: list[Variant], results: dict[str, Result]) -> list[Row]:
    made = []
    for variant in variants:
        result = results[variant.key]
        n, metered = max(result.requests, 1), max(result.metered_requests, 1)
        units: Units = result.metered.units.scaled(1 / metered)
        made.append(
            Row(
                variant.backend,
                variant.name,
                variant.family,
                variant.steps,
                variant.base,
                statistics.median(result.latencies) * 1e3,
                percentile(result.latencies, 99) * 1e3,
                statistics.median(result.round_cpu) * 1e3,
                result.timed.path / n,
                result.timed.all / n,
                result.timed.attempts / n,
                units.wru,
                units.rru,
                units.index_wru,
                units.usd_per_million,
                {op: count / metered for op, count in sorted(result.metered.ops.items())},
                result.repeats,
            )
        )
    return made


def _ops(row: Row) -> str:
    return "; ".join(f"{op} {count:g}" for op, count in row.ops.items())


SQL_COLUMN = {"sqlite": "statements", "postgres": "round trips (DBOS: statements)"}
"""The SQL stores' second count per request, beside their transactions."""


def _sql_cells(kind: str, row: Row) -> list[str]:
    """Transactions and statements (SQLite) or round trips (PostgreSQL) per metered request. An
    idemflow store counts its calls: on PostgreSQL each is one query in autocommit (one round
    trip, one implicit transaction); on SQLite each one transaction (a commit or a read), its
    statements uncounted (–)."""
    store = row.ops.get("idemflow store calls", 0.0)
    transactions = row.ops.get("transactions", 0.0) + store
    if kind == "postgres":
        second = row.ops.get("round trips", row.ops.get("statements", 0.0)) + store
        return [f"{transactions:g}", f"{second:g}"]
    statements = row.ops.get("statements")
    shown = "–" if statements is None else f"{statements:g}" + (f" + {store:g} store calls" if store else "")
    return [f"{transactions:g}", shown]


def _backend_table(report: Report, kind: str, found: list[Row]) -> None:
    header = ["variant", "p50 ms", "p99 ms", "CPU ms", "calls on path", "calls in all"]
    if kind == "dynamodb-local":
        header += ["WRU", "of which index", "RRU", "$ per million requests"]
    elif kind == "azurite":
        header += ["billable transactions"]
    elif kind in SQL_COLUMN:
        header += ["transactions", SQL_COLUMN[kind]]
    header += ["calls by operation (metered requests)"]
    table = []
    for row in found:
        cells = [
            row.name,
            f"{row.p50_ms:.2f}",
            f"{row.p99_ms:.2f}",
            f"{row.cpu_ms:.3f}",
            f"{row.calls_path:.2f}",
            f"{row.calls_all:.2f}",
        ]
        if kind == "dynamodb-local":
            cells += [f"{row.wru:g}", f"{row.index_wru:g}", f"{row.rru:g}", f"{row.usd_per_million:.3f}"]
        elif kind == "azurite":
            cells += [f"{row.calls_all:.2f}"]
        elif kind in SQL_COLUMN:
            cells += _sql_cells(kind, row)
        table.append([*cells, _ops(row)])
    report.table(header, table)


@dataclass(frozen=True)
class Ratio:
    backend: str
    what: str
    p50: Summary
    cpu: Summary
    calls: float
    money: float | None


def _ratio(
    kind: str, what: str, num: Variant, den: Variant, results: dict[str, Result], by: dict[str, Row]
) -> Ratio:
    a, b = results[num.key], results[den.key]
    top, bottom = by[num.key], by[den.key]
    money = None
    if kind == "dynamodb-local" and bottom.usd_per_million > 0:
        money = top.usd_per_million / bottom.usd_per_million
    return Ratio(
        kind,
        what,
        paired_ratio(what, a.round_p50, b.round_p50),
        paired_ratio(what, a.round_cpu, b.round_cpu),
        top.calls_all / bottom.calls_all if bottom.calls_all else float("nan"),
        money,
    )


WITH_INDEX = "idemflow 2 steps, open-runs index"
"""The 2-step workflow on a runs table made with its index of open runs (``open_runs_index=1``)."""


def ratios(variants: list[Variant], results: dict[str, Result], found: list[Row]) -> list[Ratio]:
    by_name = {(v.backend, v.name): v for v in variants}
    by = {f"{row.backend}/{row.name}": row for row in found}
    pairs: list[tuple[str, str, str, str]] = []
    for kind in LABELS:
        for steps in (1, 2, 5):
            suffix = f"{steps} step{'s' if steps > 1 else ''}"
            pairs.append((kind, f"idemflow / minimal, {suffix}", f"idemflow {suffix}", f"minimal {suffix}"))
            asyncio = f"idemflow {suffix}, asyncio"
            pairs.append((kind, f"idemflow / minimal, {suffix}, asyncio", asyncio, f"minimal {suffix}"))
        pairs.append(
            (
                kind,
                "idemflow / minimal, 2 steps, duplicate",
                "idemflow 2 steps, duplicate",
                "minimal 2 steps, duplicate",
            )
        )
    pairs += [
        ("dynamodb-local", "idemflow function / Powertools", "idemflow function", "Powertools"),
        (
            "dynamodb-local",
            "idemflow function / Powertools, duplicate",
            "idemflow function, duplicate",
            "Powertools, duplicate",
        ),
        *(
            (kind, "idemflow 2 steps: asyncio / blocking", "idemflow 2 steps, asyncio", "idemflow 2 steps")
            for kind in ("dynamodb-local", "azurite")
        ),
        *(
            pair
            for kind in targets.SQL
            for pair in (
                (kind, "idemflow 2 steps / DBOS", "idemflow 2 steps", "DBOS"),
                (
                    kind,
                    "idemflow 2 steps / DBOS, duplicate",
                    "idemflow 2 steps, duplicate",
                    "DBOS, duplicate",
                ),
            )
        ),
        (
            "dynamodb-local",
            "idemflow / minimal, 2 steps, open-runs index",
            WITH_INDEX,
            "minimal 2 steps",
        ),
        ("dynamodb-local", "idemflow 2 steps: open-runs index / none", WITH_INDEX, "idemflow 2 steps"),
    ]
    made = []
    for kind, what, num, den in pairs:
        top, bottom = by_name.get((kind, num)), by_name.get((kind, den))
        if top is not None and bottom is not None:
            made.append(_ratio(kind, what, top, bottom, results, by))
    order = list(LABELS)
    return sorted(made, key=lambda r: order.index(r.backend))  # stable: each backend's together


def write(
    report: Report,
    variants: list[Variant],
    results: dict[str, Result],
    calibration: list[Case],
    idle: float,
) -> Path:
    found = rows(variants, results)
    measured = ratios(variants, results, found)
    kinds = list(dict.fromkeys(v.backend for v in variants))
    report.add(
        "One client, one request at a time. Every variant of every backend runs in each round, the",
        "order shuffled with a fixed seed; each variant was warmed up first. *p50*/*p99*: latency of",
        "the timed requests (ms). *CPU*: the client process's CPU (user + system, all threads: the",
        "stores' background completion writes included, waited for inside the round) per request,",
        "median over the rounds. *calls on path*: backend calls the caller waited for; *in all*: with",
        "the off-path ones (completion records, expiry sweeps, asyncio tasks). DynamoDB units come from",
        "a metering pass after the rounds (each request's items read before and after each call, and",
        f"priced by AWS's on-demand rules: see `benchmarks/cost.py`); dollars at ${USD_PER_MILLION_WRU} per",
        f"million WRU and ${USD_PER_MILLION_RRU} per million RRU (on demand, us-east-1). Azure bills each",
        "REST call as one transaction (a batch is one `POST $batch`); SQLite has no bill: its calls are",
        "transactions and autocommit statements (idemflow: the store's own count; DBOS: SQLAlchemy's).",
        f"The process's idle CPU (background threads) was {idle * 1e3:.1f} ms per second.",
        "",
    )
    for kind in kinds:
        report.add(f"## {LABELS[kind]}", "")
        _backend_table(report, kind, [row for row in found if row.backend == kind])
        report.add(*NOTES[kind], "")
        if kind == "sqlite" and not any(v.backend == kind and v.name == "DBOS" for v in variants):
            report.add("DBOS Transact was left out (`--no-dbos`, or not installed: the `bench` extra).", "")
        notes = [row for row in found if row.backend == kind and row.repeats]
        if notes:
            report.add(
                f"Keys repeated more than once (pool ran dry): {', '.join(r.name for r in notes)}.", ""
            )
    report.add(
        "## Ratios, measured in the same run",
        "",
        "Latency and CPU: medians of per-round ratios (IQR). Calls: in all, per request. Money: dollars",
        "per request on DynamoDB (request units priced).",
        "",
    )
    report.table(
        ["backend", "ratio", "p50", "CPU", "calls", "money"],
        [
            [
                r.backend,
                r.what,
                fmt_ratio(r.p50),
                fmt_ratio(r.cpu),
                f"{r.calls:.2f}",
                "–" if r.money is None else f"{r.money:.2f}",
            ]
            for r in measured
        ],
    )
    verdicts = targets.verdicts(measured)
    if verdicts:
        report.add(
            "## Issue 45's targets on the SQL stores",
            "",
            "Each target beside the ratio measured for it (median of per-round ratios; see",
            "`benchmarks/cost/targets.py`).",
            "",
        )
        report.table(["backend", "ratio", "measure", "target", "measured", ""], targets.rows(verdicts))
    capacity_section(report, variants, results, calibration)
    plot = figure(report.out / f"{report.name}.png", found, kinds, LABELS)
    report.add(f"![per-variant p50 and what it is billed]({plot.name})", "")
    for r in measured:
        headline = HEADLINES.get(r.what)
        if headline is not None:
            money = "" if r.money is None else f", money ×{r.money:.2f}"
            note = f"p50, median of per-round ratios; calls ×{r.calls:.2f}{money}"
            report.headline(f"{report.name}.{r.backend}.{headline}", r.p50, note=note)
            if r.backend in targets.SQL and headline.startswith("idemflow_over_minimal"):
                cpu = headline.replace("idemflow_over_minimal", "idemflow_over_minimal_cpu")
                report.headline(f"{report.name}.{r.backend}.{cpu}", r.cpu, note="client CPU, per round")
    report.data = {
        "rows": [asdict(row) for row in found],
        "ratios": [{**asdict(r), "p50": asdict(r.p50), "cpu": asdict(r.cpu)} for r in measured],
        "checks": {
            v.key: [asdict(c) for c in results[v.key].checks] for v in variants if results[v.key].checks
        },
        "calibration": [{"what": c.what, **asdict(c.check)} for c in calibration],
        "targets": [{**asdict(v.target), "measured": asdict(v.measured), "met": v.met} for v in verdicts],
        "latencies_ms": {v.key: [t * 1e3 for t in results[v.key].latencies] for v in variants},
        "round_cpu_ms": {v.key: [t * 1e3 for t in results[v.key].round_cpu] for v in variants},
        "idle_cpu_ms_per_s": idle * 1e3,
    }
    return report.write()


def target_lines(variants: list[Variant], results: dict[str, Result]) -> list[str]:
    """Issue 45's targets beside the measured ratios, for the console."""
    found = rows(variants, results)
    return targets.console(targets.verdicts(ratios(variants, results, found)))


def summary_of(found: list[Row]) -> list[str]:
    """One line per variant for the console."""
    return [
        f"  {row.backend:15} {row.name:36} p50 {row.p50_ms:7.2f} ms  cpu {row.cpu_ms:6.3f} ms  "
        f"calls {row.calls_path:.2f}/{row.calls_all:.2f}  WRU {row.wru:g} RRU {row.rru:g}"
        for row in found
    ]
