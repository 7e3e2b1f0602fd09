"""The page of ``outbox``: latency per submit, where its time goes, calls and bytes per submit,
what the worker and the relay cost, the headlines and the figure.

Why apart: turning the measured variants into tables is a job of its own, and the longest one.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report, fmt_ratio
from benchmarks.common.stats import paired_ratio, percentile
from benchmarks.outbox.rounds import RELAY_PASSES, SETTLED, VARIANTS, Variant


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _latency(variant: Variant) -> str:
    return f"{_ms(statistics.median(variant.latencies))} ({_ms(percentile(variant.latencies, 95))})"


def _n(value: float) -> str:
    return f"{value:.2f}"


def write(
    report: Report, measured: dict[str, dict[str, Variant]], commit: str, candidate: str, out: Path
) -> None:
    report.add(
        f"*baseline* is idemflow at {commit[:12]} (`git archive`), *candidate* {candidate}.",
        "Each runs in its own process, on its own fresh tables of the same backend, rounds interleaved",
        "(the order rotates). Workload: `tests.support.async_workflows.survey` with a checkpoint after",
        "step 1, a new request id per submit; `submit` runs step 1 and sends the continuation; a worker",
        "finishes the request between rounds, untimed. A round's sample is the median of its submits;",
        "the ratio is candidate / baseline per round (median, IQR across rounds). Counts are per submit.",
        "",
        "## Latency per submit",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        base, cand = variants["baseline"], variants["candidate"]
        ratio = paired_ratio(kind, cand.samples, base.samples)
        settled = variants.get(SETTLED)
        rows.append(
            [
                LABELS[kind],
                _latency(base),
                _latency(cand),
                f"**{fmt_ratio(ratio)}**",
                "–" if settled is None else _latency(settled),
                "–" if settled is None else fmt_ratio(paired_ratio(kind, settled.samples, base.samples)),
            ]
        )
        report.headline(f"outbox.{kind}.candidate_over_baseline_latency", ratio, note="submit, 1 client")
        print(
            f"  outbox {kind}: baseline {_latency(base)} ms, candidate {_latency(cand)} ms, "
            f"ratio {fmt_ratio(ratio)}"
            + ("" if settled is None else f"; deletes awaited {_latency(settled)} ms"),
            flush=True,
        )
    report.table(
        [
            "backend",
            "baseline median ms (p95)",
            "candidate median ms (p95)",
            "candidate / baseline",
            f"{SETTLED} (untimed): median ms (p95)",
            "its ratio to baseline",
        ],
        rows,
    )
    report.add(
        f"*{SETTLED}*: the candidate again (its own process, tables and rounds), waiting (untimed) after",
        "each submit for its background deletion of the outbox entry, so that none overlaps the next",
        "submit (on moto the deletion and the next submit's transaction queue on the one request thread;",
        "in the process they share the GIL). Not measured on SQLite, whose deletion is synchronous.",
        "On moto the store's commit is mostly the emulator's price: its `TransactWriteItems` deep-copies",
        "the table of each item in the transaction, once per item, before applying it, so the candidate's",
        "extra item (the outbox entry) costs one more copy of the run-record table, which holds a row per",
        "request (now with its input).",
        "",
    )
    report.add(
        "Where a submit's time goes, mean ms per submit: the store's commits, the queue send and the",
        "`commit_cache` call (the outbox entry's deletion: the write itself on SQLite, handing it to the",
        "background thread on the others) as timed around the calls; the rest is the library and",
        "everything else in `submit`.",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name, v in variants.items():
            mean = statistics.fmean(v.latencies)
            commits = v.per_request("client", "commit_seconds")
            send = v.per_request("client", "send_seconds")
            cache = v.per_request("client", "cache_seconds")
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    _ms(mean),
                    _ms(commits),
                    _ms(send),
                    _ms(cache),
                    _ms(mean - commits - send - cache),
                ]
            )
    report.table(
        ["backend", "variant", "mean ms", "store commits", "queue send", "commit_cache call", "the rest"],
        rows,
    )
    report.add(
        "## Calls and bytes per submit",
        "",
        "*on path*: backend calls before `submit` returns — the store's round trips (including e.g. the",
        "Azure store's reads behind a commit) minus its cache writes, plus the queue send; *reads* and",
        "*commits* are the store API calls behind them. *off path*: `commit_cache` writes (the candidate's",
        "deletion of its outbox entry) — a background thread on DynamoDB and Azure; on SQLite written on the",
        "caller's thread without an fsync, so there its time is inside the latency above. Bytes are logical",
        "(partition + row key + encoded value per written row, `benchmarks/common/counting.py`).",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name in VARIANTS:
            v = variants[name]
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    f"**{_n(v.path_calls)}**",
                    _n(v.per_request("client", "reads")),
                    _n(v.per_request("client", "commits")),
                    _n(v.per_request("client", "sends")),
                    _n(v.per_request("client", "rows")),
                    f"{v.per_request('client', 'bytes'):.0f}",
                    f"{statistics.median(v.message_bytes):.0f}",
                    f"**{_n(v.off_path_calls)}**",
                    f"{v.per_request('client', 'cache_bytes'):.0f}",
                ]
            )
        base, cand = variants["baseline"], variants["candidate"]
        key = f"outbox.{kind}"
        report.headline(
            f"{key}.calls_on_path",
            {"baseline": round(base.path_calls, 2), "candidate": round(cand.path_calls, 2)},
            note="store + queue calls before submit returns",
        )
        report.headline(
            f"{key}.calls_off_path",
            {"baseline": round(base.off_path_calls, 2), "candidate": round(cand.off_path_calls, 2)},
            note="commit_cache (outbox entry deletion)",
        )
        report.headline(
            f"{key}.message_bytes",
            {n: round(statistics.median(variants[n].message_bytes)) for n in VARIANTS},
            note="queue message body",
        )
    report.table(
        [
            "backend",
            "variant",
            "on path calls",
            "reads",
            "commits",
            "queue sends",
            "rows written",
            "bytes written",
            "message bytes",
            "off path calls",
            "off path bytes",
        ],
        rows,
    )
    report.add(
        "## What the worker does to finish a request, and the outbox relay",
        "",
        "Per request the worker finished (untimed, between rounds; its relay off, measured apart):",
        "backend calls of the store (round trips, cache writes included) and the store API calls",
        "behind them; queue calls (receive, delete) not counted. The relay: one pass over an empty",
        "outbox (the candidate's workers each run one every `relay_every` seconds, 10 by default).",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name in VARIANTS:
            v = variants[name]
            relay = v.relay
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    f"**{_n(v.per_request('worker', 'round_trips'))}**",
                    _n(v.per_request("worker", "reads")),
                    _n(v.per_request("worker", "commits")),
                    _n(v.per_request("worker", "cache_writes")),
                    f"{v.per_request('worker', 'bytes') + v.per_request('worker', 'cache_bytes'):.0f}",
                    "–" if relay is None else _n(float(relay["per_pass"]["scans"]) / RELAY_PASSES),
                    "–" if relay is None else _ms(float(relay["seconds"])),
                ]
            )
        report.headline(
            f"outbox.{kind}.worker_calls",
            {n: round(variants[n].per_request("worker", "round_trips"), 2) for n in VARIANTS},
            note="store calls per request finished",
        )
    report.table(
        [
            "backend",
            "variant",
            "worker store calls",
            "reads",
            "commits",
            "cache writes",
            "bytes written",
            "relay: partition queries per pass",
            "relay: ms per pass",
        ],
        rows,
    )
    from benchmarks.common.plot import panels_figure

    latency = {
        kind: {
            n: paired_ratio(n, v.samples, variants["baseline"].samples).median for n, v in variants.items()
        }
        for kind, variants in measured.items()
    }
    calls = {
        kind: {
            "baseline on path": variants["baseline"].path_calls,
            "candidate on path": variants["candidate"].path_calls,
            "candidate off path": variants["candidate"].off_path_calls,
        }
        for kind, variants in measured.items()
    }
    plot = panels_figure(
        out / "outbox.png",
        "submit with the transactional outbox (candidate) against the previous release (baseline)",
        [
            ("submit latency / baseline (median of rounds)", latency, False),
            ("backend calls per submit", calls, False),
        ],
    )
    report.add(f"![outbox]({plot.name})", "")
    report.write()
