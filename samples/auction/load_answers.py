"""Whether the load's clients were told the truth: their answers against what the server shows.

Apart from :mod:`samples.auction.load`, which sends the requests: this is
the load's verdict (each item closed once, sold to the highest accepted
bid, led and counted), while :mod:`samples.auction.verdict` judges the
tables themselves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from samples._api import Answer
from samples.auction.clients import AuctionApi
from samples.auction.load_report import Closer, LoadReport


def _close_outcome(answer: Answer) -> str:
    """How a close was answered: ``sold``, ``unsold``, ``unsold (payment failed)`` or the refusal."""
    if answer.status == 200:
        failed = "payment" in str(answer.body.get("reason", ""))
        return str(answer.body["status"]) + (" (payment failed)" if failed else "")
    return str(answer.body.get("error"))


def _timer_outcome(body: Mapping[str, Any]) -> str:
    """How an item's timer ended (``GET /items/{item}/closing``), in :func:`_close_outcome`'s words."""
    if body.get("status") == "completed":
        return str(body["result"]["status"])
    reason = body.get("reason")
    code = reason.get("code") if isinstance(reason, dict) else None
    return "unsold (payment failed)" if code == "payment_failed" else str(code or body.get("status"))


def _verify(
    api: AuctionApi,
    report: LoadReport,
    plan: Sequence[tuple[str, str, dict[str, Any]]],
    bids: Mapping[str, list[Answer]],
    closers: Sequence[Closer],
    closes: Mapping[str, list[Answer]],
    timers: Mapping[str, Answer],
) -> list[str]:
    """The clients' view against the server's: closes, sales, leaders and popular counts."""
    problems: list[str] = []
    best: dict[str, dict[str, Any]] = {}
    accepted: Counter[str] = Counter()
    for key, item, _body in plan:
        first = bids[key][0]
        if first.status == 201:
            report.bids["accepted"] += 1
            accepted[item] += 1
            if item not in best or first.body["amount"] > best[item]["amount"]:
                best[item] = first.body
        else:
            report.bids[str(first.body.get("error"))] += 1
    won: dict[str, list[tuple[str, Answer]]] = {}  # who closed each item, and what they were told
    for key, item, phase in closers:
        first = closes[key][0]
        report.closes.setdefault(phase, Counter())[_close_outcome(first)] += 1
        if first.status == 200:
            won.setdefault(item, []).append((key, first))
        elif phase == "late" and timers and first.body.get("error") != "already_closed":
            problems.append(f"{item!r}: a close after its timer finished was answered {first}")
    for item, got in timers.items():
        outcome = _timer_outcome(got.body)
        report.timers[outcome] += 1
        if outcome != "already_closed":
            won.setdefault(item, []).append(("its timer", Answer(200, got.body.get("result") or {})))
    counted = {row["item"]: row["bids"] for row in api.popular("100").body.get("items", [])}
    for item in sorted({item for _key, item, _phase in closers}):
        top, polled = best.get(item), api.winner(item).body
        sale, closed = polled.get("result") or {}, won.get(item, [])
        if len(closed) != 1:
            problems.append(f"{item!r}: closed by {[who for who, _answer in closed]}, not exactly once")
        elif closed[0][1].body.get("status", sale.get("status")) != sale.get("status"):
            problems.append(f"{item!r}: {closed[0][0]} was told {closed[0][1]}, but the result is {sale}")
        elif sale.get("status") == "sold" and (
            top is None or (sale["winner"], sale["amount"]) != (top["bidder"], top["amount"])
        ):
            problems.append(f"{item!r}: sold as {sale}, but the highest accepted bid was {top}")
        elif sale.get("status") == "unsold" and (top is None) != (sale.get("reason") == "no bids"):
            problems.append(f"{item!r}: unsold ({sale.get('reason')}), the highest accepted bid was {top}")
        elif sale.get("status") not in ("sold", "unsold"):
            problems.append(f"{item!r}: closed, but the published result is {sale}")
        if polled.get("leader") != top:
            problems.append(f"{item!r}: the polled leader is not the highest accepted bid {top}")
        if counted.get(item, 0) != accepted[item]:
            problems.append(
                f"{item!r}: {accepted[item]} bids accepted, popular counts {counted.get(item, 0)}"
            )
    return problems
