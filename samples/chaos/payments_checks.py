"""What the payments workload checks: the provider's books against the requests' ends.

:func:`invariants` holds at every instant (the monitor checks it while the round runs):

- no charge is refunded twice (two refund keys for one charge) and no refund names a charge never
  made; no request is charged under two keys;
- a request that ended ``completed`` has no refund, one that ended ``aborted`` none of its money
  kept: its compensations ran before its record said so, so a charge it left at the provider
  unrefunded is money kept for a request undone;
- per flight, the ``held`` counters of seats and meals equal their holders' rows and never pass
  the capacity.

:func:`check_round` holds once every request ended: each ended ``completed`` (charged once, not
refunded, a seat and a meal held), ``aborted`` (its charge, if any, refunded exactly once, nothing
held; a declined card aborted naming the decline, its card declined at most as often as
deliveries could repeat the call) or ``failed`` naming a compensation whose refund is still owed,
which is only an anomaly if the provider was up at the end (``owed`` counts the others); seats and
meals held equal the completed bookings.

>>> from idemflow.stores import MemoryStore
>>> import random
>>> from samples.chaos.payments_provider import Provider
>>> provider = Provider(random.Random(1), late_share=0.0)
>>> for key in ("u1", "u2"):
...     _ = provider.call("/refund", {"key": key, "charge": "ch-9", "request": "r1"}, 0)
>>> invariants(provider, {})(MemoryStore())
['refund u1 of ch-9, never charged (request r1)', 'refund u2 of ch-9, never charged (request r1)']
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from idemflow.client import RequestStatus, RunStatus, status
from idemflow.stores import Store
from samples.chaos.payments_flows import BOOKING, DECLINED_CARD, MEALS, SEATS, Booking, seats_taken
from samples.chaos.payments_provider import Charged, Ledger, Provider

UNDO = "compensate effect charge"
"""How a reason names the refund (the undo of the effect ``charge``)."""


@dataclass
class Verdict:
    """The end of a round: the anomalies, and the refunds owed while the provider is down."""

    problems: list[str] = field(default_factory=list)
    owed: int = 0
    ends: Counter[str] = field(default_factory=Counter)
    """How the requests ended (``completed``, ``aborted: sold out``, ...), for the round's line."""


def _by_request(ledger: Ledger) -> dict[str, list[Charged]]:
    found: dict[str, list[Charged]] = defaultdict(list)
    for made in ledger.charges.values():
        found[made.request].append(made)
    return found


def _books(ledger: Ledger) -> list[str]:
    """What is wrong in the provider's books alone."""
    problems = list(ledger.strays)
    for charge, times in sorted(Counter(ledger.refunds.values()).items()):
        if times > 1:
            made = ledger.charges[charge]
            problems.append(f"charge {charge} of {made.request} refunded {times} times")
    for request, charges in sorted(_by_request(ledger).items()):
        if len(charges) > 1:
            problems.append(f"{request} charged {len(charges)} times: {sorted(each.id for each in charges)}")
    return problems


def _held(store: Store, capacities: Mapping[str, tuple[int, int]]) -> list[str]:
    problems = []
    for table, which in ((SEATS, 0), (MEALS, 1)):
        for flight, (held, holders) in seats_taken(store, table).items():
            if held != len(holders):
                problems.append(f"{table}/{flight}: held {held}, but {len(holders)} holders")
            if flight in capacities and held > capacities[flight][which]:
                problems.append(f"{table}/{flight}: held {held} of {capacities[flight][which]}")
    return problems


def invariants(provider: Provider, capacities: Mapping[str, tuple[int, int]]) -> Callable[[Store], list[str]]:
    """The check the monitor repeats; ``capacities`` are each flight's seats and meals. The
    requests' final statuses are remembered (they never change), so a check reads only the
    records of requests whose charges it has not judged yet."""
    final: dict[str, RunStatus] = {}

    def check(store: Store) -> list[str]:
        for made in provider.ledger().charges.values():
            if made.request not in final:
                found = status(store, BOOKING, made.request).status
                if found.final:
                    final[made.request] = found
        # The books read after the records: a refund made before a record said aborted is in them.
        ledger = provider.ledger()
        problems = _books(ledger)
        refunded = set(ledger.refunds.values())
        for made in ledger.charges.values():
            end = final.get(made.request)
            if end is RunStatus.COMPLETED and made.id in refunded:
                problems.append(f"{made.request} completed, but its charge {made.id} was refunded")
            if end is RunStatus.ABORTED and made.id not in refunded:
                problems.append(f"{made.request} aborted, but its charge {made.id} was never refunded")
        return problems + _held(store, capacities)

    return check


def _one(
    booking: Booking, seen: RequestStatus, charges: list[Charged], ledger: Ledger, holders: tuple[bool, bool]
) -> tuple[list[str], str, bool]:
    """One request's end: ``(problems, how it ended, refund owed while the provider is down)``."""
    rid = booking["id"]
    refunded = [key for key, charge in ledger.refunds.items() if charge in {made.id for made in charges}]
    declined = booking["card"] == DECLINED_CARD
    problems: list[str] = []
    if seen.status is RunStatus.COMPLETED:
        if len(charges) != 1 or refunded:
            problems.append(f"{rid} completed with {len(charges)} charges, {len(refunded)} refunds")
        if declined:
            problems.append(f"{rid} completed on a declined card")
        if holders != (True, True):
            problems.append(f"{rid} completed, but holds (seat, meal) {holders}")
        return problems, "completed", False
    if seen.status is RunStatus.ABORTED:
        reason = str(seen.reason)
        if charges and len(refunded) != 1:
            problems.append(f"{rid} aborted ({reason}) with its charge refunded {len(refunded)} times")
        if any(holders):
            problems.append(f"{rid} aborted ({reason}), but still holds (seat, meal) {holders}")
        named = "CardDeclined" in reason  # a declined card may abort before its charge: flight full
        if named != (declined and ledger.declines[rid] > 0):
            problems.append(
                f"{rid} (card {booking['card']}, declined {ledger.declines[rid]}) aborted: {reason}"
            )
        return problems, "aborted: " + reason.split(":")[0][:40], False
    failure = seen.failure.reason if seen.failure is not None else str(seen.reason)
    if seen.status is RunStatus.FAILED and UNDO in failure:
        if ledger.down:
            return [], "failed, refund owed", True
        if charges and not refunded:
            return [f"{rid} failed with the money kept, the provider up: {failure}"], "failed", False
        return [f"{rid} failed, though its refund was made: {failure}"], "failed", False
    return (
        [f"{rid} never ended: {seen.status.value}, {failure} (waiting {seen.waiting})"],
        "unfinished",
        False,
    )


def check_round(
    store: Store, ledger: Ledger, bookings: list[Booking], seen: Mapping[str, RequestStatus], retries: int
) -> Verdict:
    """The end of a round (see the module docstring). ``retries`` bounds how often a declined card
    may be called legitimately: once per delivery, and deliveries only repeat on a copy, a kill
    or a store fault."""
    verdict = Verdict(_books(ledger))
    charges = _by_request(ledger)
    seats, meals = seats_taken(store, SEATS), seats_taken(store, MEALS)
    known = {booking["id"] for booking in bookings}
    for request in sorted(set(charges) - known):
        verdict.problems.append(f"a charge for {request}, a request never made")
    completed: Counter[str] = Counter()
    for booking in bookings:
        rid, flight = booking["id"], booking["flight"]
        holders = (
            rid in seats.get(flight, (0, frozenset()))[1],
            rid in meals.get(flight, (0, frozenset()))[1],
        )
        problems, end, owed = _one(booking, seen[rid], charges.get(rid, []), ledger, holders)
        verdict.problems += problems
        verdict.ends[end] += 1
        verdict.owed += owed
        completed[flight] += seen[rid].status is RunStatus.COMPLETED
        if ledger.declines[rid] > retries:
            verdict.problems.append(f"{rid}: its declined card was called {ledger.declines[rid]} times")
    for table, taken in ((SEATS, seats), (MEALS, meals)):
        for flight in sorted({*taken, *completed}):
            held = taken.get(flight, (0, frozenset()))[0]
            if held != completed[flight]:
                verdict.problems.append(
                    f"{table}/{flight}: {held} held, {completed[flight]} completed bookings"
                )
    return verdict
