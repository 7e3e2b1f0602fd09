"""The page, record and plots of :mod:`benchmarks.timers`."""

from __future__ import annotations

from typing import Any

from benchmarks.common.backends import LABELS
from benchmarks.common.report import Report
from benchmarks.common.stats import percentile
from benchmarks.timers.calls import OPERATIONS
from benchmarks.timers.lateness import Outcome

KEYS = {"under load": "load", "worker killed at due": "killed"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def _three(values: list[float]) -> list[str]:
    return [_ms(percentile(values, 50)), _ms(percentile(values, 99)), _ms(max(values))]


def write(
    report: Report,
    lateness: dict[str, dict[str, Outcome]],
    calls: dict[str, dict[str, Any]],
    kill_visibility: float,
    load_visibility: float,
) -> None:
    report.add(
        "Lateness of a timer = *actual − due*: *due* is the sleep's memoized due time (read from its",
        "memo), *actual* the wall clock when the step after the sleep ran (its body records it: the",
        "attempt that committed). *request end*: when the request's outcome was written (its run",
        "record's `finished_at`, the worker's clock). Workers are `idemflow worker` processes",
        "(the CLI), on the same 2 cores as the load generator and the emulators. A continuation",
        "is queued with a delay of `min(due − now, 900 s)`; SQS and Azure Queue round it up to whole",
        "seconds, the SQLite queue keeps fractions. moto: DynamoDB on the suite's one-call-at-a-time",
        "moto server, SQS on a threaded moto server of its own (SQS serves calls concurrently; on a",
        "one-call-at-a-time server each worker's 1 s long poll of an empty queue holds every send).",
        "",
        "## Timer lateness",
        "",
        f"*under load*: visibility timeout {load_visibility:g} s. *worker killed at due*: visibility",
        f"timeout **{kill_visibility:g} s**; every worker process SIGKILLed as soon as a worker finished",
        "the first timer of a batch (all due at one instant), new ones started at once.",
        "*background done*: the requests that never sleep, finished of submitted, and the time from",
        "the call to `submit` to their outcome: how far behind the workers and the backend run, for",
        "comparison. *load at end*: the machine's 1-minute load average when the scenario ended.",
        "",
    )
    rows = []
    for kind, scenarios in lateness.items():
        for scenario, outcome in scenarios.items():
            late = [t.late for t in outcome.timers]
            ends = [t.finished_late for t in outcome.timers]
            early = sum(1 for value in late if value < 0)
            background = "–"
            if outcome.background_seconds:
                waited = outcome.background_seconds
                background = f"{outcome.background_done}/{outcome.background}: " + " / ".join(
                    _three(waited)[:2]
                )
            rows.append(
                [
                    LABELS[kind],
                    scenario,
                    str(len(late)),
                    *[f"**{cell}**" for cell in _three(late)],
                    _ms(min(late)),
                    str(early),
                    *_three(ends),
                    background,
                    str(outcome.failed_submits),
                    f"{outcome.seconds:.0f}",
                    f"{outcome.load:.1f}",
                ]
            )
            key = f"timers.{kind}.{KEYS[scenario]}"
            report.headline(
                f"{key}.lateness_ms",
                {
                    name: round(percentile(late, q) * 1e3)
                    for name, q in (("p50", 50), ("p99", 99), ("max", 100))
                },
                note=f"{scenario}: step after the sleep − due",
            )
            report.headline(f"{key}.early", early, note="timers whose next step ran before due")
            report.data.setdefault("lateness", {}).setdefault(kind, {})[scenario] = {
                "timers": [
                    [t.request_id, t.batch, t.due, t.ran, t.finished, t.delivery] for t in outcome.timers
                ],
                "background": [outcome.background, outcome.background_done],
                "background_seconds": outcome.background_seconds,
                "failed_submits": outcome.failed_submits,
                "kills": outcome.kills,
                "seconds": outcome.seconds,
                "load_at_end": outcome.load,
            }
    report.table(
        [
            "backend",
            "scenario",
            "timers",
            "p50 ms",
            "p99 ms",
            "max ms",
            "min ms",
            "early",
            "request end p50",
            "p99",
            "max",
            "background done: submit → end p50 / p99 ms",
            "failed submits",
            "s",
            "load at end",
        ],
        rows,
    )
    _kills(report, lateness, kill_visibility)
    _calls(report, calls)
    _plots(report, lateness, calls)
    report.write()


def _kills(report: Report, lateness: dict[str, dict[str, Outcome]], visibility: float) -> None:
    rows = []
    for kind, scenarios in lateness.items():
        outcome = scenarios.get("worker killed at due")
        if outcome is None:
            continue
        held = [t for t in outcome.timers if t.delivery > 1]
        rest = [t.late for t in outcome.timers if t.delivery <= 1]
        kills = ", ".join(
            f"{k['after_due'] * 1e3:,.0f} ms ({k['finished_before']:.0f})" for k in outcome.kills
        )
        rows.append(
            [
                LABELS[kind],
                kills,
                f"{len(held)} of {len(outcome.timers)}",
                " / ".join(_three([t.late for t in held])) if held else "–",
                " / ".join(_three([t.finished_late for t in held])) if held else "–",
                " / ".join(_three(rest)) if rest else "–",
            ]
        )
    if not rows:
        return
    report.add(
        "### Worker killed at the due time",
        "",
        "Each kill: how long after the batch's due instant it came (a worker had finished that many",
        "of the batch by then). *Redelivered*: timers whose last message the finishing worker held at",
        "its second delivery or later (its log line's `attempt`): a killed worker held it, and it came",
        f"back once its visibility timeout ({visibility:g} s) ran out. If the killed worker had run the",
        "step after the sleep already, only the request's end waited for that. The others were",
        "finished before the kill or received by the new workers (their start-up: a Python process",
        "importing idemflow and the SDK, on the loaded machine).",
        "",
    )
    report.table(
        [
            "backend",
            "kills: after due (timers of the batch finished)",
            "redelivered",
            "their step after the sleep: p50 / p99 / max ms",
            "their request end: p50 / p99 / max ms",
            "the others' step: p50 / p99 / max ms",
        ],
        rows,
    )


def _calls(report: Report, calls: dict[str, dict[str, Any]]) -> None:
    if not calls:
        return
    report.add(
        "## Calls per operation, against a plain step",
        "",
        "Mean per request (per receiver + sender pair for send + receive), counted from `submit` until",
        "every request involved is final, minus those of the same workflow without the operation",
        "(`bench-base`: one step). *store calls*: the store's own count of backend calls (including its",
        "background cache writes, e.g. the outbox entry's deletion); *reads*, *scans*, *commits*, *cache",
        "writes*: the store API calls behind them; *queue sends*: continuations and pointers sent;",
        "*messages*: the worker handled (each also one receive and one delete, not counted above).",
        "*client*: store calls before `submit` returned. *base* is the whole one-step workflow.",
        "",
    )
    rows = []
    for kind, found in calls.items():
        plain = found["plain step"]["round_trips"] + found["plain step"]["sends"]
        for name in ("base", *OPERATIONS):
            c = found[name]
            total = c["round_trips"] + c["sends"]
            rows.append(
                [
                    LABELS[kind] if name == "base" else "",
                    name,
                    f"**{c['round_trips']:.1f}**",
                    f"{c['client_round_trips']:.1f}",
                    f"{c['reads']:.1f}",
                    f"{c['scans']:.1f}",
                    f"{c['commits']:.1f}",
                    f"{c['cache_writes']:.1f}",
                    f"**{c['sends']:.1f}**",
                    f"{c['handled']:.1f}",
                    "–" if name == "base" or plain <= 0 else f"{total / plain:.1f}×",
                ]
            )
        report.headline(
            f"timers.{kind}.calls",
            {o: round(found[o]["round_trips"] + found[o]["sends"], 1) for o in OPERATIONS},
            note="store calls + queue sends per operation",
        )
    report.data["calls"] = calls
    report.table(
        [
            "backend",
            "operation",
            "store calls",
            "client",
            "reads",
            "scans",
            "commits",
            "cache writes",
            "queue sends",
            "messages",
            "(store + sends) / plain step",
        ],
        rows,
    )


def _plots(report: Report, lateness: dict[str, dict[str, Outcome]], calls: dict[str, dict[str, Any]]) -> None:
    """``timers.png``: a panel per scenario (the fraction of timers at most so late, a line per
    backend), then the calls per operation (a bar per operation, grouped by backend)."""
    from benchmarks.common.plot import _pyplot, _save

    panels: dict[str, dict[str, list[float]]] = {}
    for kind, scenarios in lateness.items():
        for scenario, outcome in scenarios.items():
            panels.setdefault(scenario, {})[kind] = sorted(t.late for t in outcome.timers)
    if not panels and not calls:
        return
    plt = _pyplot()
    count = len(panels) + bool(calls)
    fig, axes = plt.subplots(1, count, figsize=(5.2 * count, 4.2), squeeze=False)
    for ax, (scenario, series) in zip(axes[0], panels.items(), strict=False):
        for kind, late in series.items():
            fractions = [(n + 1) / len(late) for n in range(len(late))]
            ax.plot(late, fractions, drawstyle="steps-post", label=kind)
        ax.set_xlabel("step after the sleep − due (s)")
        ax.set_ylabel("fraction of timers at most that late")
        ax.set_title(scenario, fontsize="medium")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if calls:
        ax = axes[0][-1]
        width, top = 0.8 / len(OPERATIONS), 0.0
        for n, operation in enumerate(OPERATIONS):
            values = [found[operation]["round_trips"] + found[operation]["sends"] for found in calls.values()]
            ax.bar([g + n * width for g in range(len(calls))], values, width, label=operation)
            top = max(top, *values)
        ax.set_ylim(0, top * 1.3)  # room for the legend above the bars
        ax.set_xticks([g + width * (len(OPERATIONS) - 1) / 2 for g in range(len(calls))], list(calls))
        ax.set_ylabel("store calls + queue sends")
        ax.set_title("backend calls per operation", fontsize="medium")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="small", ncol=2, loc="upper left")
    path = _save(plt, fig, report.out / "timers.png", "durable timers: lateness, and calls per operation")
    report.add(f"![timer lateness and calls per operation]({path.name})", "")
