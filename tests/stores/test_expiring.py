"""When stores sweep: the schedule's "again at once", and Azure's pages that end with more after them."""

from __future__ import annotations

import pytest

from idemflow.stores._azure_calls import AzureCalls, Page
from idemflow.stores._expiring import Schedule
from idemflow.stores.base import ExpiryReport


def test_a_sweep_that_has_more_to_read_asks_for_the_next_at_once() -> None:
    """A sweep that found little but whose store is behind (``more``) is followed at the next
    commit; one that found little and is not waits ``every``; a full batch never waits."""
    now = [0.0]
    schedule = Schedule(60.0, clock=lambda: now[0])
    assert not schedule.due()
    assert schedule.due(early=True)  # the store's pace may claim one before its time
    schedule.done(ExpiryReport(3, 3, 0), 100, more=True)
    assert schedule.due()
    schedule.done(ExpiryReport(3, 3, 0), 100)
    assert not schedule.due()
    now[0] = 60.0
    assert schedule.due()
    schedule.done(ExpiryReport(100, 0, 0), 100)  # a full batch (held rows count too)
    assert schedule.due()


def test_an_azure_page_ending_with_a_continuation_asks_for_more() -> None:
    """Azure may end a page short of its size with a continuation token: the table is not done,
    so the store says it has more (the schedule then sweeps again at once), until a page ends
    the table."""
    calls = AzureCalls("", 60.0)
    page = calls._expired_page("tablea", 1e9, 100)
    assert isinstance(next(page), Page)
    with pytest.raises(StopIteration) as done:
        page.send(([], "next-token"))  # no row, but more after it
    assert done.value.value == []
    assert calls.expiry_more() and not calls.expiry_pass_ended()
    page = calls._expired_page("tablea", 1e9, 100)
    assert next(page).token == "next-token"  # resumed where the last page stopped
    with pytest.raises(StopIteration):
        page.send(([], None))
    assert not calls.expiry_more() and calls.expiry_pass_ended()
