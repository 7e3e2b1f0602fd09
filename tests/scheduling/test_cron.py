"""A schedule's ticks as cronsim computes them: the walk backwards a pass takes meets the same
instants as the walk forwards (daylight-saving transitions included, in several zones), the
catch-up cap bounds the walk, and Europe/Berlin's transitions go as Debian's cron goes."""

from __future__ import annotations

from datetime import datetime

import pytest

from idemflow.scheduling.cron import Cron, check_expression, local, zone_of

EXPRESSIONS = [
    "30 2 * * *",
    "*/30 * * * *",
    "0 * * * *",
    "15 1-3 * * *",
    "0 0 1 * *",
    "45 2 * * 0",
    "10 */2 * * *",
]
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_passes_at_any_instants_find_the_ticks_of_one_walk(expression: str, zone: str) -> None:
    """Over the weeks of 2027's transitions in each zone (March 14 to April 4, October 3 to
    November 7, the southern zone's too): passes every 97 minutes, each finding the ticks since
    the last one's instant, find exactly the ticks of one window over the whole span, each once.
    So however the schedulers' passes fall, they agree on every tick (and on its request id)."""
    cron = Cron(expression, zone)
    for (month, day), days in ((3, 8), 32), ((9, 28), 44):  # every zone's transitions of 2027
        start = datetime(2027, month, day, tzinfo=cron.zone).timestamp()
        end = start + days * 86400
        whole, _ = cron.ticks(start, end, limit=100_000)
        found: list[float] = []
        at = start
        while at < end:
            upto = min(at + 97 * 60, end)
            found.extend(cron.ticks(at, upto, limit=100_000)[0])
            at = upto
        assert tuple(found) == whole and len(set(whole)) == len(whole) > 0


@pytest.mark.parametrize("zone", ["Europe/Berlin", "Australia/Lord_Howe"])
def test_the_next_tick_listed_is_the_next_tick_a_pass_fires(zone: str) -> None:
    """``schedules list``'s next tick (:meth:`Cron.next_after`) is, tick after tick through both
    transitions, the first tick a pass finds after the last one."""
    for expression in EXPRESSIONS:
        cron = Cron(expression, zone)
        start = datetime(2027, 3, 20, tzinfo=cron.zone).timestamp()
        ticks, _ = cron.ticks(start, start + 20 * 86400, limit=100_000)
        following = [cron.next_after(tick) for tick in (start, *ticks[:-1])]
        assert following == list(ticks), expression


def test_the_walk_stops_at_its_limit_and_says_older_ticks_were_left() -> None:
    cron = Cron("* * * * *", "UTC")
    ticks, older = cron.ticks(0.0, 1_800_000_000.0, limit=3)  # 57 years of minutes, 3 steps
    assert ticks == (1_799_999_880.0, 1_799_999_940.0, 1_800_000_000.0) and older
    assert cron.ticks(1_799_999_940.0, 1_800_000_000.0, limit=3) == ((1_800_000_000.0,), False)
    assert cron.ticks(1_800_000_000.0, 1_800_000_059.9, limit=3) == ((), False)


def _day(cron: Cron, day: str) -> list[str]:
    start = datetime.fromisoformat(day + "T00:00:00").replace(tzinfo=cron.zone).timestamp()
    ticks, _ = cron.ticks(start - 1, start + 5 * 3600, limit=100)
    return [local(tick, cron.zone)[11:] for tick in ticks]


def test_berlin_spring_forward() -> None:
    """2027-03-28, 02:00 -> 03:00: a daily 02:30 runs at 03:00 (the first minute after the gap,
    as Debian's cron runs a job whose time was skipped); an hourly job has no 02:00."""
    assert _day(Cron("30 2 * * *", "Europe/Berlin"), "2027-03-28") == ["03:00:00+02:00"]
    assert _day(Cron("0 * * * *", "Europe/Berlin"), "2027-03-28") == [
        "00:00:00+01:00",
        "01:00:00+01:00",
        "03:00:00+02:00",
        "04:00:00+02:00",
        "05:00:00+02:00",
        "06:00:00+02:00",
    ]


def test_berlin_fall_back() -> None:
    """2027-10-31, 03:00 -> 02:00: a daily 02:30 runs once (the first 02:30); an hourly job runs
    at both 02:00, two instants an hour apart."""
    assert _day(Cron("30 2 * * *", "Europe/Berlin"), "2027-10-31") == ["02:30:00+02:00"]
    assert _day(Cron("0 * * * *", "Europe/Berlin"), "2027-10-31") == [
        "00:00:00+02:00",
        "01:00:00+02:00",
        "02:00:00+02:00",
        "02:00:00+01:00",
        "03:00:00+01:00",
        "04:00:00+01:00",
    ]


def test_seconds_and_never_firing_expressions() -> None:
    assert Cron("*/20 * * * * *", "UTC").ticks(0.0, 60.0, limit=10) == ((20.0, 40.0, 60.0), False)
    with pytest.raises(ValueError, match="never fires"):
        check_expression("* * */20 * 1L", zone_of("UTC"))
    with pytest.raises(ValueError, match="unknown timezone"):
        zone_of("Europe/Atlantis")
