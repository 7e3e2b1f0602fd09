"""What a chaos run is asked to do (:class:`Options`), what each workload counts (:class:`Totals`)
and the summary table (:func:`render`).

>>> Totals("demo", requests=3, submissions=5).duplicates
2
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass
class Totals:
    """What one workload did and found, summed over its rounds."""

    workload: str
    rounds: int = 0
    requests: int = 0
    submissions: int = 0
    kills: int = 0
    faults: int = 0
    anomalies: list[str] = field(default_factory=list)
    checks: int = 0
    """Invariant checks made while the workload ran (besides the checks at the end of each round)."""
    deploys: int = 0
    """Worker fleets replaced, while requests were in flight, by workers holding other versions."""
    oversize: int = 0
    """Requests whose input is larger than the queue's body limit (only a pointer travels)."""
    charges: int = 0
    """Charges in an outside payment provider's books (the payments workload)."""
    refunds: int = 0
    declines: int = 0
    """Requests whose card the provider declined."""
    outages: int = 0
    """Times the provider went down."""
    late: int = 0
    """Provider calls answered later than the caller's timeout."""
    aborts: int = 0
    """Operators' aborts of requests in flight."""
    owed: int = 0
    """Requests that ended failed naming a refund still owed, while the provider was down at the end."""
    events: int = 0
    """Distinct event values the readers of running requests read (the reading workload)."""
    values: int = 0
    """Stream values the readers read."""
    quotes: int = 0
    """Calls made at an outside provider by ``all_of`` branches (one per idempotency key)."""
    repeats: int = 0
    """Calls the provider answered from its books (a retry under a key already made)."""
    cancels: int = 0
    """Operators' cancels (``cancel(..., children=True)``) of requests in flight."""
    kids_cancelled: int = 0
    """Children cancelled with them."""
    nudges: int = 0
    """``any_of`` blocks a message won (the others: the sleep)."""

    @property
    def duplicates(self) -> int:
        return self.submissions - self.requests

    def add(self, other: Totals) -> None:
        """Add ``other``'s counts and anomalies to these.

        >>> both = Totals("both")
        >>> both.add(Totals("a", 1, 2, 3, deploys=2))
        >>> both.add(Totals("b", 1, 5, 5, anomalies=["x"], oversize=1))
        >>> both.rounds, both.requests, both.deploys, both.oversize, both.anomalies
        (2, 7, 2, 1, ['x'])
        """
        for each in fields(self):
            if each.name != "workload":
                setattr(self, each.name, getattr(self, each.name) + getattr(other, each.name))


@dataclass(frozen=True)
class Options:
    """One chaos run (``seconds`` scales nothing: rounds repeat until the time is up)."""

    seconds: float
    seed: int
    workdir: Path
    out: Path | None
    fault_rate: float = 0.08
    dynamodb: str | None = None
    """DynamoDB Local's endpoint for the workloads on AWS's engine (None: they are skipped)."""
    quick: bool = False
    """Smaller rounds: the short run of the test suite."""
    only: tuple[str, ...] = ()
    """Run only the workloads whose names start with one of these (empty: all of them)."""


COLUMNS = (
    "workload",
    "rounds",
    "requests",
    "duplicates",
    "oversize",
    "kills",
    "deploys",
    "injected faults",
    "checks while running",
    "anomalies",
)


def render(totals: Sequence[Totals], opts: Options, seconds: float) -> str:
    """The summary table (Markdown).

    >>> text = render([Totals("w", 1, 2, 3, deploys=2, oversize=1)], Options(1, 0, Path("."), None), 1)
    >>> print(next(line for line in text.splitlines() if line.startswith("| **total**")))
    | **total** | 1 | 2 | 1 | 1 | 0 | 2 | 0 | 0 | 0 |
    """
    all_ = Totals("**total**")
    for total in totals:
        all_.add(total)
    quick = " --quick" if opts.quick else ""
    quick += "".join(f" --only {name!r}" for name in opts.only)
    lines = [
        "# Chaos run",
        "",
        f"`python -m samples.chaos --seconds {opts.seconds:g} --seed {opts.seed}{quick}`: "
        f"{seconds:.0f} s, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---" + "|---:" * (len(COLUMNS) - 1) + "|",
    ]
    for t in [*totals, all_]:
        counts = (t.rounds, t.requests, t.duplicates, t.oversize, t.kills, t.deploys, t.faults, t.checks)
        lines.append(f"| {t.workload} | " + " | ".join(map(str, counts)) + f" | {len(t.anomalies)} |")
    lines += _payments([*totals, all_])
    lines += _reading([*totals, all_])
    lines += [
        "",
        "Requests are distinct requests (transfers, survey responses, bids, naps, parents, senders, "
        "receivers, bookings, jobs), duplicates the extra "
        "copies sent; oversize, the requests whose input is larger than the queue's 256 KiB body "
        "limit; kills count SIGKILLs and processes that ended themselves right after a commit; "
        "deploys, how often the worker processes were replaced by ones holding other versions of "
        "the workflow while requests were in flight; checks while running, how often a monitor "
        "checked the invariants that hold at every instant (each round is also checked in full at "
        "its end).",
        "",
        "Anomalies must be 0. " + ("None found." if not all_.anomalies else "Found:"),
    ]
    lines += [f"- {anomaly}" for anomaly in all_.anomalies[:50]]
    return "\n".join(lines) + "\n"


PAYMENT_COLUMNS = (
    "workload",
    "charges",
    "refunds",
    "declined",
    "outages",
    "late answers",
    "operator aborts",
    "refunds owed (provider down)",
)


def _payments(totals: Sequence[Totals]) -> list[str]:
    """The outside provider's side, for the workloads that pay through one (none: no table).
    Requests, kills and anomalies are in the table above.

    >>> table = _payments([Totals("p", charges=3, refunds=1, outages=2), Totals("t")])
    >>> [line for line in table if line.startswith("| p ")]
    ['| p | 3 | 1 | 0 | 2 | 0 | 0 | 0 |']
    """
    paying = [t for t in totals if t.charges or t.declines or t.outages]
    if not paying:
        return []
    lines = [
        "",
        "| " + " | ".join(PAYMENT_COLUMNS) + " |",
        "|---" + "|---:" * (len(PAYMENT_COLUMNS) - 1) + "|",
    ]
    for t in paying:
        counts = (t.charges, t.refunds, t.declines, t.outages, t.late, t.aborts, t.owed)
        lines.append(f"| {t.workload} | " + " | ".join(map(str, counts)) + " |")
    return [
        *lines,
        "",
        "Charges and refunds are those in the provider's books (one per idempotency key); declined, "
        "the requests whose card it declined; outages, how often it went down; late answers, its "
        "answers later than the caller's timeout; refunds owed, requests that ended failed naming "
        "their refund while the provider was still down at the end (with the provider up that is an "
        "anomaly).",
    ]


READING_COLUMNS = (
    "workload",
    "events read",
    "stream values read",
    "quotes made",
    "repeats",
    "cancelled",
    "children cancelled",
    "messages won",
)


def _reading(totals: Sequence[Totals]) -> list[str]:
    """What the readers of running requests read and what ``all_of``/``any_of``/``cancel`` did,
    for the workloads that read (none: no table).

    >>> table = _reading([Totals("r", events=9, values=40, quotes=12, cancels=2), Totals("t")])
    >>> [line for line in table if line.startswith("| r ")]
    ['| r | 9 | 40 | 12 | 0 | 2 | 0 | 0 |']
    """
    reading = [t for t in totals if t.events or t.values or t.quotes]
    if not reading:
        return []
    lines = [
        "",
        "| " + " | ".join(READING_COLUMNS) + " |",
        "|---" + "|---:" * (len(READING_COLUMNS) - 1) + "|",
    ]
    for t in reading:
        counts = (t.events, t.values, t.quotes, t.repeats, t.cancels, t.kids_cancelled, t.nudges)
        lines.append(f"| {t.workload} | " + " | ".join(map(str, counts)) + " |")
    return [
        *lines,
        "",
        "Events read are the distinct values of the requests' events their readers saw (with "
        "`get_event`, while the requests ran); stream values, the values read with `read_stream` "
        "from offset 0 (each once, in order); quotes made, the `all_of` branches' calls the outside "
        "provider made (one per idempotency key), repeats the calls it answered from its books "
        "(a retry under a key already made); cancelled, the requests an operator cancelled in "
        "flight with `cancel(..., children=True)`, and the children cancelled with them; messages "
        "won, the `any_of` blocks a message won (the others: the sleep).",
    ]
