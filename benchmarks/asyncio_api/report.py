"""The page of ``asyncio_api``: per server backend the HTTP table and the ratios to threadpool,
the figure, the one-client table, the headlines and the JSON record.

Why apart: turning the cells into tables and plots is a job of its own, away from measuring them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.asyncio_api.http import Cell
from benchmarks.asyncio_api.params import PROBE_TARGET_MS, RATIO_TARGET, RATIOS, VARIANTS
from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import Summary, paired_ratio, percentile, summarize


def _med(cells: list[Cell], value: Callable[[Cell], float | None]) -> float | None:
    found = [v for v in (value(c) for c in cells) if v is not None]
    return statistics.median(found) if found else None


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(values: Sequence[float], q: float) -> float | None:
    return 1e3 * percentile(values, q) if values else None


def _ratio(
    cells: dict[str, list[Cell]], value: Callable[[Cell], float | None], variant: str = "async"
) -> Summary | None:
    pairs = [(value(a), value(t)) for a, t in zip(cells[variant], cells["threadpool"], strict=True)]
    ratios = [a / t for a, t in pairs if a is not None and t is not None and t > 0]
    return summarize(f"{variant}/threadpool", ratios) if ratios else None


def _fr(summary: Summary | None) -> str:
    return "–" if summary is None else fmt_ratio(summary)


def write_http(report: Report, kind: str, cells: dict[int, dict[str, list[Cell]]]) -> None:
    report.add(f"## {LABELS[kind]}: the survey API under N concurrent clients", "")
    rows = []
    for n, variants in cells.items():
        for variant in VARIANTS:
            cs = variants[variant]
            failed: dict[str, int] = {}
            for c in cs:
                for status, count in c.failed.items():
                    failed[status] = failed.get(status, 0) + count
            rows.append(
                [
                    str(n) if variant == VARIANTS[0] else "",
                    variant,
                    f"**{_f(_med(cs, lambda c: c.throughput))}**",
                    _f(_med(cs, lambda c: _ms(c.latencies, 50))),
                    _f(_med(cs, lambda c: _ms(c.latencies, 95))),
                    _f(_med(cs, lambda c: _ms(c.probes, 50)), 2),
                    f"**{_f(_med(cs, lambda c: _ms(c.probes, 99)), 2)}**",
                    _f(max((_ms(c.probes, 99) or 0.0) for c in cs), 2),
                    _f(_med(cs, lambda c: _ms(c.lags, 99)), 2),
                    _f(_med(cs, lambda c: 1e3 * c.cpu / max(c.answered, 1)), 1),
                    str(sum(c.answered for c in cs)),
                    ", ".join(f"{count}× {status}" for status, count in sorted(failed.items())) or "0",
                ]
            )
    report.table(
        [
            "N",
            "variant",
            "requests/s",
            "p50 ms",
            "p95 ms",
            "probe p50 ms",
            "probe p99 ms",
            "probe p99, worst round",
            "server loop lag p99 ms",
            "server CPU ms/request",
            "answered",
            "failed",
        ],
        rows,
    )
    report.add("Ratios to threadpool, per round (median, IQR over rounds):", "")
    rows = []
    for n, variants in cells.items():
        for variant in RATIOS:
            rows.append(
                [
                    str(n) if variant == RATIOS[0] else "",
                    f"{variant} / threadpool",
                    _fr(_ratio(variants, lambda c: c.throughput, variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.latencies, 50), variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.latencies, 95), variant)),
                    _fr(_ratio(variants, lambda c: _ms(c.probes, 99), variant)),
                    _fr(_ratio(variants, lambda c: c.cpu / max(c.answered, 1), variant)),
                ]
            )
    report.table(
        ["N", "ratio", "requests/s", "p50 latency", "p95 latency", "probe p99", "server CPU/request"], rows
    )
    most = max(cells)
    for variant in VARIANTS:
        p99 = _med(cells[most][variant], lambda c: _ms(c.probes, 99))
        if p99 is not None:
            report.headline(
                f"asyncio_api.{kind}.{variant}.probe_p99_ms.{most}",
                round(p99, 2),
                note=f"GET /probe during the survey load, {most} clients, median of rounds",
            )
    throughput = _ratio(cells[most], lambda c: c.throughput)
    if throughput is not None:
        report.headline(
            f"asyncio_api.{kind}.async_over_threadpool_throughput.{most}",
            throughput,
            note=f"survey API, {most} clients",
        )


def figure(out: Path, http: dict[str, dict[int, dict[str, list[Cell]]]]) -> Path:
    from benchmarks.common.plot import _pyplot, _save

    plt = _pyplot()
    fig, axes = plt.subplots(len(http), 3, figsize=(15, 3.8 * len(http)), squeeze=False)
    measures: list[tuple[str, Callable[[Cell], float | None], bool]] = [
        ("answered requests/s", lambda c: c.throughput, False),
        ("p95 latency (ms)", lambda c: _ms(c.latencies, 95), True),
        ("probe p99 (ms)", lambda c: _ms(c.probes, 99), True),
    ]
    for row, (kind, cells) in enumerate(http.items()):
        ns = list(cells)
        for ax, (what, value, logy) in zip(axes[row], measures, strict=True):
            for variant, marker in zip(VARIANTS, ("o", "^", "s"), strict=True):
                ys = [_med(cells[n][variant], value) for n in ns]
                ax.plot(ns, [float("nan") if y is None else y for y in ys], marker=marker, label=variant)
            if what.startswith("probe"):
                ax.axhline(
                    PROBE_TARGET_MS, color="grey", linestyle="--", label=f"target {PROBE_TARGET_MS:g} ms"
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(ns, [str(n) for n in ns])
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel(what)
            ax.set_title(f"{LABELS[kind]}: {what}", fontsize="medium")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
    return _save(
        plt,
        fig,
        out / "asyncio_api.png",
        "survey API: async (arun), bounded (in_flight=4) and threadpool (run)",
    )


def write(
    report: Report,
    http: dict[str, dict[int, dict[str, list[Cell]]]],
    one: dict[str, dict[str, list[float]]],
    out: Path,
) -> None:
    report.add(
        "The survey sample's `respond` workflow behind three minimal Starlette apps on uvicorn (one",
        "worker each, their own processes): *threadpool* runs `run` on a blocking store through",
        "`run_in_threadpool` (what the samples did before; anyio's default 40 threads), *async* awaits",
        "`Idempotency(store).run` (`arun`) on the store of `open_async_store` (opened in the app's",
        "lifespan), *bounded* the same with `Idempotency(store, in_flight=4)` (at most 4 runs under",
        "way; the other requests wait their turn). The load generator",
        "(this process, one `httpx.AsyncClient`) runs N clients sending responses back to back, each",
        "with a fresh `Idempotency-Key`; meanwhile a probe GETs `/probe` (no store call) every 10 ms",
        "on a connection of its own. Every cell runs on fresh tables after a few untimed requests,",
        "the clients answering one survey on moto (it serialises transactions, so they never conflict,",
        "and every transaction slows with the table: a survey per client would add its rows) and a",
        "survey each on Azurite (a step's read of the survey is checked by an ETag-bumping write: the",
        "clients of one survey would conflict; contention is the `contention` benchmark's subject);",
        "variants interleave cell by cell, the order alternating; values are medians over rounds of",
        "each round's figure (*worst round*: the largest). *server loop lag*: how late the server's",
        "loop woke from a 5 ms sleep during the cell (sampled in the server itself). *server CPU*:",
        "the server process's CPU time during the cell over its answered requests (the probes' and",
        "the sampler's share included: it weighs most at low throughput). Emulators serve one request",
        "at a time (moto) or on one Node thread (Azurite): throughput saturates early for both variants.",
        "",
    )
    for kind, cells in http.items():
        write_http(report, kind, cells)
    if http:
        plot = figure(out, http)
        report.add(f"![asyncio_api]({plot.name})", "")
    else:
        report.add("No server backend chosen: the HTTP part did not run.", "")
    report.add(
        "## The 2-step workflow at one client, in process: `arun` against `run`",
        "",
        "`benchmarks.common.workloads`' survey request (`respond`: record, checkpoint, count), one at a",
        "time, no HTTP: `run` on the blocking store against `arun` on `open_async_store` of the same",
        "kind (SQLite: the blocking store on 8 threads of its own, `ThreadedStore`), each on tables",
        "of its own; a sample is a round's mean per request, the ratio async / sync is paired by",
        f"round. Target: ≤ {RATIO_TARGET}.",
        "",
    )
    rows = []
    for kind, samples in one.items():
        ratio = paired_ratio(kind, samples["async"], samples["sync"])
        rows.append(
            [
                LABELS[kind],
                f"{1e3 * statistics.median(samples['sync']):.2f}",
                f"{1e3 * statistics.median(samples['async']):.2f}",
                f"**{fmt_ratio(ratio)}**",
                "met" if ratio.median <= RATIO_TARGET else "**missed**",
            ]
        )
        report.headline(
            f"asyncio_api.{kind}.async_over_sync_latency", ratio, note="2-step workflow, 1 client, in process"
        )
    report.table(["store", "run ms/request", "arun ms/request", "async / sync", "target ≤ 1.05"], rows)
    report.data["http"] = {
        kind: {
            str(n): {variant: [c.record() for c in cs] for variant, cs in variants.items()}
            for n, variants in cells.items()
        }
        for kind, cells in http.items()
    }
    report.data["one_client_seconds"] = one
    report.write()
