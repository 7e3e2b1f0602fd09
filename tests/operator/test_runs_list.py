"""``runs`` a page at a time on every store: each request once, in the store's order, whatever
arrives between pages; filters kept across pages; a cursor or limit that is not one refused."""

from __future__ import annotations

import pytest

from idemflow import InvalidInputError
from idemflow.admin import RunRecord, RunsPage, runs
from idemflow.client import RunStatus
from idemflow.records import run_ref
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Insert, Op
from tests.conformance.test_workflow_contract import new_space

pytestmark = pytest.mark.exact_calls  # records are written with plain commits, never resent

START = 1.8e9


def record_ops(space: str, numbers: range, *, workflow: str = "listed") -> list[Op]:
    """Run records of requests ``space + n``: every third running, the rest completed; starts
    repeat in pairs, so ties are broken by workflow and request id."""
    ops: list[Op] = []
    for n in numbers:
        started = START + n // 2
        record = RunRecord("f" * 64, RunStatus.RUNNING, started_at=started)
        if n % 3:
            record = record.finished(RunStatus.COMPLETED, started + 1, result=n)
        value = record.to_json()
        ops.append(Insert(run_ref(workflow, f"{space}{n:03d}"), value, encode(value)))
    return ops


def write(store: Store, ops: list[Op]) -> None:
    step = 1 if not store.capabilities.cross_partition_commit else 25
    for at in range(0, len(ops), step):
        store.commit(ops[at : at + step])
    store.flush()


def every_page(store: Store, limit: int, after: str | None = None, **filters: object) -> list[RunsPage]:
    """The pages from ``after`` on, to the last."""
    pages = [runs(store, limit=limit, after=after, **filters)]  # type: ignore[arg-type]
    while pages[-1].next is not None:
        pages.append(runs(store, limit=limit, after=pages[-1].next, **filters))  # type: ignore[arg-type]
        assert len(pages) < 100
    return pages


def test_pages_list_every_request_once_in_the_stores_order(store: Store) -> None:
    space = new_space()
    write(store, record_ops(space, range(23)))
    pages = every_page(store, 4, workflow="listed")
    assert all(len(page.runs) == 4 for page in pages[:-1]) and len(pages[-1].runs) <= 4
    listed = [found.request_id for page in pages for found in page.runs]
    assert sorted(listed) == [f"{space}{n:03d}" for n in range(23)]  # each once
    shown = pages[0].to_json()
    assert shown["next"] == pages[0].next and shown["order"] == pages[0].order
    assert [one["request_id"] for one in shown["runs"]] == listed[:4]  # type: ignore[index, union-attr]
    if pages[0].order == "newest first":
        assert listed == [f"{space}{n:03d}" for n in reversed(range(23))]
    else:
        assert pages[0].order == "key order"


def test_requests_arriving_between_pages_shift_nothing(store: Store) -> None:
    """Keyset paging: a request that existed through the listing is listed once, whatever starts
    (or is written, in key order anywhere) between pages; on a newest-first store the new ones
    are on a first page, not on a later one."""
    space = new_space()
    write(store, record_ops(space, range(0, 40, 2)))
    first = runs(store, limit=5, workflow="listed")
    write(store, record_ops(space, range(1, 41, 2)))  # newer, older and between the first 20
    later = every_page(store, 5, workflow="listed", after=first.next)
    listed = [found.request_id for page in [first, *later] for found in page.runs]
    assert len(listed) == len(set(listed))
    assert {f"{space}{n:03d}" for n in range(0, 40, 2)} <= set(listed)
    if first.order == "newest first":
        last = first.runs[-1].age_from() or 0.0
        assert all((found.age_from() or 0.0) <= last for page in later for found in page.runs)


def test_filters_hold_across_pages(store: Store) -> None:
    space = new_space()
    write(store, record_ops(space, range(30)))
    write(store, record_ops(space, range(6), workflow="other"))
    running = [f.request_id for page in every_page(store, 3, status=RunStatus.RUNNING) for f in page.runs]
    mine = sorted(request for request in running if request.startswith(space))
    assert mine == sorted([f"{space}{n:03d}" for n in range(0, 30, 3)] + [f"{space}{n:03d}" for n in (0, 3)])
    one = every_page(store, 4, workflow="other", status=RunStatus.COMPLETED)
    assert sorted(f.request_id for page in one for f in page.runs) == [
        f"{space}{n:03d}" for n in (1, 2, 4, 5)
    ]
    aged = every_page(store, 4, workflow="listed", older_than=0, now=lambda: START + 4.5)
    assert sorted(f.request_id for page in aged for f in page.runs) == [f"{space}{n:03d}" for n in range(10)]


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_a_limit_that_is_no_count_is_refused(store: Store, limit: object) -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        runs(store, limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("cursor", ["nonsense!", "bm90IGpzb24", "W10", "eyJwayI6IDF9"])
def test_a_cursor_no_page_gave_is_refused(store: Store, cursor: str) -> None:
    with pytest.raises(InvalidInputError, match=r"cursor|position"):
        runs(store, limit=2, after=cursor)
