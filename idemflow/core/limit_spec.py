"""What a flow-control limit is: a concurrency of N under a lease, a rate of count per period.

A limit is declared where the workflow is (``@workflow(..., concurrency=2, rate=Rate(5, 1.0))``)
or once for a provider shared by several workflows (``LimitGroup("payments", concurrency=5)``,
named by each with ``groups=``), and checked here, at decoration time: a typo in a limit must
fail when the module is imported, not when the first request meets it. The state a limit keeps
(slots and buckets) lives in the store, in :mod:`idemflow.limits.slots`.

>>> payments = LimitGroup("payments", concurrency=5, rate=Rate(50, per=1.0))
>>> payments.limit.concurrency
Concurrency(slots=5, lease=30.0)
>>> Rate(0, per=1.0)
Traceback (most recent call last):
...
idemflow.errors.InvalidInputError: a rate's count is an int >= 1, not 0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from idemflow.errors import InvalidInputError
from idemflow.keys import check_duration, check_workflow_name

DEFAULT_LEASE = 30.0
"""Seconds a slot is held without renewal: how long a SIGKILLed holder's slot stays taken."""


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{what} is an int >= 1, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts per ``per`` seconds, as a token bucket holding ``burst`` tokens.

    The bucket refills at ``count / per`` tokens a second up to ``burst`` (default ``count``):
    over any ``T`` seconds at most ``burst + count * T / per`` requests start.

    >>> Rate(5, per=1.0).burst
    5
    """

    count: int
    per: float = 1.0
    burst: int | None = None

    def __post_init__(self) -> None:
        _count(self.count, "a rate's count")
        object.__setattr__(self, "per", check_duration(self.per, "a rate's period"))
        burst = self.count if self.burst is None else _count(self.burst, "a rate's burst")
        object.__setattr__(self, "burst", burst)

    @property
    def per_second(self) -> float:
        """Tokens added to the bucket each second."""
        return self.count / self.per

    @property
    def capacity(self) -> int:
        """The bucket's size (``burst``, set by construction)."""
        return self.count if self.burst is None else self.burst


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``slots`` requests inside at once, each slot held under a ``lease`` of seconds.

    A holder renews its lease between its store calls; a holder that died gives its slot
    back when the lease ends (docs/flow-control.md says what a lease cannot promise).

    >>> Concurrency(2, lease=10)
    Concurrency(slots=2, lease=10.0)
    """

    slots: int
    lease: float = DEFAULT_LEASE

    def __post_init__(self) -> None:
        _count(self.slots, "a concurrency limit")
        object.__setattr__(self, "lease", check_duration(self.lease, "a concurrency lease"))


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit's scope (``workflow`` or ``group``), its name and what it bounds."""

    kind: str
    name: str
    concurrency: Concurrency | None
    rate: Rate | None

    def slots_why(self) -> str:
        """What a request waiting for a slot waits for (shown by ``status`` and ``runs show``)."""
        assert self.concurrency is not None
        return f"concurrency slot of {self.kind} {self.name} ({self.concurrency.slots} at once)"

    def rate_why(self) -> str:
        """What a request waiting for a token waits for."""
        assert self.rate is not None
        return f"rate of {self.kind} {self.name} ({self.rate.count} per {self.rate.per:g} s)"


def check_concurrency(value: object) -> Concurrency | None:
    """``concurrency=``: an int of slots, a :class:`Concurrency`, or None."""
    if value is None or isinstance(value, Concurrency):
        return value
    return Concurrency(_count(value, "a concurrency limit"))


def check_rate(value: object) -> Rate | None:
    """``rate=``: a :class:`Rate` or None (one typed form: no strings to parse)."""
    if value is None or isinstance(value, Rate):
        return value
    raise InvalidInputError(f"rate takes a Rate(count, per=seconds), not {value!r}")


class LimitGroup:
    """A limit shared by every workflow that names it: one provider's contract across workflows.

    Declare it once (a module-level constant) and pass it to each ``@workflow(..., groups=[g])``:
    every request of those workflows takes a slot (and a token) of the group, in every process
    sharing the store. The store keeps the group's state by its name; processes that declare
    one name with different numbers each enforce their own, so declare it in one place.

    >>> payments = LimitGroup("payments", concurrency=5)
    >>> payments
    LimitGroup('payments', concurrency=5, rate=None)
    """

    __slots__ = ("limit",)

    def __init__(self, name: str, *, concurrency: int | Concurrency | None = None, rate: Rate | None = None):
        checked = check_workflow_name(name)
        slots, bucket = check_concurrency(concurrency), check_rate(rate)
        if slots is None and bucket is None:
            raise InvalidInputError(f"limit group {name!r} needs concurrency= or rate=")
        self.limit = Limit("group", checked, slots, bucket)

    def __repr__(self) -> str:
        slots = None if self.limit.concurrency is None else self.limit.concurrency.slots
        return f"LimitGroup({self.limit.name!r}, concurrency={slots}, rate={self.limit.rate})"


def workflow_limits(
    name: str, concurrency: object, rate: object, groups: Iterable[LimitGroup] | None
) -> tuple[Limit, ...]:
    """The limits a workflow's requests take, in the order they are taken; checked here."""
    own = Limit("workflow", name, check_concurrency(concurrency), check_rate(rate))
    limits = [own] if own.concurrency is not None or own.rate is not None else []
    if groups is not None:
        if isinstance(groups, LimitGroup) or not isinstance(groups, Iterable):
            raise InvalidInputError(f"groups takes a list of LimitGroup, not {groups!r}")
        for group in groups:
            if not isinstance(group, LimitGroup):
                raise InvalidInputError(f"groups takes LimitGroup objects, not {group!r}")
            if any(seen.kind == "group" and seen.name == group.limit.name for seen in limits):
                raise InvalidInputError(f"limit group {group.limit.name!r} is named twice")
            limits.append(group.limit)
    return tuple(limits)


def limit_whys(limits: Iterable[Limit]) -> set[str]:
    """Every note a request held back by ``limits`` may carry in its run record."""
    whys: set[str] = set()
    for limit in limits:
        if limit.concurrency is not None:
            whys.add(limit.slots_why())
        if limit.rate is not None:
            whys.add(limit.rate_why())
    return whys


def effect_group(group: object, timeout: float | None) -> Limit | None:
    """``effect(..., group=)``: a :class:`LimitGroup` whose slot lease outlasts the call.

    The slot is held around the call alone, where no store call renews its lease: a call may
    take up to ``timeout``, so a lease shorter than that would let the slot go while the call
    is still at the provider (one over the limit).
    """
    if group is None:
        return None
    if not isinstance(group, LimitGroup):
        raise InvalidInputError(f"effect group= takes a LimitGroup, not {group!r}")
    slots = group.limit.concurrency
    if slots is not None and timeout is not None and timeout > slots.lease:
        raise InvalidInputError(
            f"effect timeout {timeout:g} s outlasts the lease of limit group {group.limit.name!r} "
            f"({slots.lease:g} s): the slot would be free while the call is still made; "
            "give the group Concurrency(N, lease=) longer than the timeout"
        )
    return group.limit
