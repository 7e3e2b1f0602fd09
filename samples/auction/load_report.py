"""What a load is sized by (:class:`LoadSettings`) and what its clients saw (:class:`LoadReport`).

Apart from :mod:`samples.auction.load`, which runs a load, because the
checks of the clients' answers (:mod:`samples.auction.load_answers`) fill
the report too: both import these, neither imports the other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from samples import _harness as harness


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Sizes of one load. Ids and amounts derive from ``seed``: re-running a load is one big duplicate."""

    users: int = 8
    bidders: int = 12
    items: int = 5
    bids: int = 200
    window: float = 4.0
    """Seconds from registration to the first closing time (the others follow, up to 1.5 times
    that); bids are spread over 1.15 times the last closing time."""
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to lead and count every bid, and for
    the timers to close every item."""
    timers: bool = True
    """Whether workers run the items' closing timers (a queue behind the API, ``idemflow worker``
    processes): the timers then close the items. False: the load closes them itself."""

    def closes_in(self, n: int) -> float:
        """Seconds from registration to item ``n``'s closing time: staggered from 1 to 1.5 windows.

        >>> [LoadSettings(items=3, window=10).closes_in(n) for n in range(3)]
        [10.0, 12.5, 15.0]
        """
        return self.window * (1 + 0.5 * n / max(self.items - 1, 1))


PHASES = ("early", "racing", "late")
"""When the load's auctioneers close an item: before its closing time, at it (racing the timer),
after it (after the timer finished, with timers)."""


@dataclass
class LoadReport(harness.LoadReport[LoadSettings]):
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    bids: Counter[str] = field(default_factory=Counter)
    closes: dict[str, Counter[str]] = field(default_factory=dict)
    """The auctioneers' closes by :data:`PHASES`: how many got each answer."""
    timers: Counter[str] = field(default_factory=Counter)
    """How the items' timers ended: ``sold``, ``unsold``, ... or ``already_closed`` (a client first)."""
    kills: list[str] = field(default_factory=list)
    """What the demo's killer did, for the report."""

    def lines(self) -> list[str]:
        s = self.settings
        refused = ", ".join(f"{n} {code}" for code, n in sorted(self.bids.items()) if code != "accepted")
        when = {"early": "before closing time", "racing": "at it, racing the timer"}
        when["late"] = "after the timer" if s.timers else "after closing time"
        closes = "; ".join(
            f"{when[phase]}: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(got.items()))
            for phase, got in sorted(self.closes.items(), key=lambda pair: PHASES.index(pair[0]))
        )
        closed = {outcome: n for outcome, n in self.timers.items() if outcome != "already_closed"}
        timers = f"{sum(closed.values())} closed their item: " + ", ".join(
            f"{n} {outcome}" for outcome, n in sorted(closed.items())
        )
        timers += f"; {self.timers['already_closed']} refused already_closed (a client's close came first)"
        return [
            f"  load      {s.bids} bids by {s.bidders} bidders on {s.items} items, sent {self.sent} times "
            f"by {s.users} users ({self.sent - s.bids} duplicates)",
            f"  bids      {self.bids['accepted']} accepted, refused: {refused or 'none'}",
            f"  closes    {closes}",
            *([f"  timers    {timers}"] if s.timers else []),
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; each item closed once, by its timer or one client, selling to the highest accepted bid",
        ]


Closer = tuple[str, str, str]
"""An auctioneer's close: ``(request id, item, phase)`` (one of :data:`PHASES`)."""


__all__ = ["PHASES", "Closer", "LoadReport", "LoadSettings"]
