"""Request tags on every store and both APIs: ``submit(tags=)`` and ``run(tags=)`` store them with
the claim, every rewrite of the run record keeps them (a retry's count, failure, an operator's
retry, cancel and abort, the outcome), ``admin.runs(tags=)`` / ``aruns`` list the requests carrying
all of those asked for, a page at a time, and bad tags are refused before anything is written."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from idemflow import Idem, InvalidInputError, StepRetry, Tx, atomic, checkpoint, receive, workflow
from idemflow.admin import RunRecord, aruns, cancel, retry, runs, show
from idemflow.client import RunStatus
from idemflow.core.policy import resend
from idemflow.records import run_ref
from idemflow.running.runner import run_status
from idemflow.serialization import encode
from idemflow.stores import Store
from idemflow.stores.base import Insert, Op, Put, RowRef
from idemflow.worker import MemoryQueue
from tests.conformance import conftest as api_dimension
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.core.test_tags import BAD_TAGS
from tests.operator.test_runs_list import START, write
from tests.support.apis import LOOP, Api, async_twin
from tests.support.workflows import rows_of

api = api_dimension.api  # both APIs, as in the conformance suite
pytest_generate_tests = api_dimension.pytest_generate_tests


def _ship(tx: Tx) -> str:
    if not tx.get("fixed"):
        raise RuntimeError("the carrier refused the parcel")
    return "shipped"


@workflow("tagged", retry=StepRetry(initial=1.0, maximum_attempts=2))
def tagged(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    """Count, checkpoint, then ship (failing until a fix row exists) or wait for a message."""
    yield atomic("tablea", req["space"] + "count", lambda tx: tx.increment("n"), name="count")
    yield checkpoint()
    if req.get("wait"):
        return (yield receive("go"))
    if req.get("ship"):
        return (yield atomic("tablea", req["space"] + "carrier", _ship, name="ship"))
    return req["n"]


def listed(api: Api, store: Store, **filters: Any) -> list[str]:
    """The request ids ``runs`` (the blocking API) or ``aruns`` (asyncio) list, a page of one at
    a time from the first page to the last."""
    found: list[str] = []
    after: str | None = None
    for _ in range(50):
        if api.name == "blocking":
            page = runs(store, limit=1, after=after, **filters)
        else:
            page = LOOP.run(aruns(async_twin(store), limit=1, after=after, **filters))
        found += [summary.request_id for summary in page.runs]
        if page.next is None:
            return found
        after = page.next
    raise AssertionError("the pages did not end")


def record(store: Store, request_id: str) -> RunRecord:
    found = run_status(store, "tagged", request_id)
    assert found is not None
    return found


def test_submitted_and_run_requests_are_listed_by_their_tags(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    mine, eu = {"customer": space}, {"customer": space, "region": "eu"}
    submitted = {"a": mine, "b": eu, "c": {"customer": space + "other"}, "d": None}
    for name, tags in submitted.items():
        req = {"space": space, "n": name}
        api.submit(tagged(req), request_id=space + name, store=store, queue=queue, clock=clock, tags=tags)
    assert api.run(tagged({"space": space, "n": "e"}), request_id=space + "e", store=store, tags=eu) == "e"
    assert sorted(listed(api, store, tags=mine)) == [space + "a", space + "b", space + "e"]
    assert sorted(listed(api, store, tags={"region": "eu", **mine})) == [space + "b", space + "e"]
    both = listed(api, store, tags=eu, workflow="tagged", status=RunStatus.RUNNING)
    assert both == [space + "b"]  # every filter at once: e completed under run
    deliver_all(api.worker([tagged], store=store, queue=queue, clock=clock), queue, clock)
    assert sorted(listed(api, store, tags=mine, status=RunStatus.COMPLETED)) == [
        space + "a",
        space + "b",
        space + "e",
    ]
    assert record(store, space + "b").tags == {"customer": space, "region": "eu"}
    assert record(store, space + "d").tags is None and record(store, space + "d").status.final
    view = show(store, [tagged], "tagged", space + "b")
    assert (
        view.tags == eu
        and view.to_json()["tags"] == eu
        and f"  tags: customer={space} region=eu" in view.lines()
    )


def test_tags_are_kept_through_retries_failure_an_operators_retry_cancel_and_abort(
    store: Store, api: Api
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    tags = {"customer": space, "order": "o-1"}
    flaky, waiting = space + "flaky", space + "waiting"
    api.submit(
        tagged({"space": space, "n": 1, "ship": True}),
        request_id=flaky,
        store=store,
        queue=queue,
        clock=clock,
        tags=tags,
    )
    api.submit(
        tagged({"space": space, "n": 2, "wait": True}),
        request_id=waiting,
        store=store,
        queue=queue,
        clock=clock,
        tags=tags,
    )
    worker = api.worker([tagged], store=store, queue=queue, clock=clock)
    for message in queue.receive(max_messages=2):
        worker.handle(message)  # the first attempt of the ship fails; the other waits for its message
    first = record(store, flaky)
    assert first.attempts is not None and first.tags == tags
    assert record(store, waiting).waiting is not None and record(store, waiting).tags == tags
    deliver_all(worker, queue, clock, settled=lambda: record(store, flaky).status is RunStatus.FAILED)
    failed = record(store, flaky)
    assert failed.status is RunStatus.FAILED and failed.failure is not None and failed.tags == tags
    # resent as the engine would: DynamoDB Local refuses a write to an item a transaction still holds
    resend(store.commit, [Put(RowRef("tablea", space + "carrier", "dfixed"), True, encode(True))])
    retry(store, queue, "tagged", flaky)
    deliver_all(worker, queue, clock, settled=lambda: record(store, flaky).status.final)
    done = record(store, flaky)
    assert (done.status, done.result, done.tags) == (RunStatus.COMPLETED, "shipped", tags)
    cancel(store, "tagged", waiting)
    assert record(store, waiting).status is RunStatus.CANCELLED and record(store, waiting).tags == tags
    ended = api.abort_request(store, [tagged], "tagged", waiting, reason="no longer wanted")
    assert ended.status is RunStatus.ABORTED and ended.tags == tags
    assert record(store, waiting).tags == tags
    assert sorted(listed(api, store, tags=tags)) == [flaky, waiting]


def test_a_copy_with_other_tags_keeps_the_first_ones(store: Store, api: Api) -> None:
    """Tags are not the input: a copy is answered as one, and the first claim's tags stay."""
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    req = {"space": space, "n": 1}
    api.submit(
        tagged(req), request_id=space + "s", store=store, queue=queue, clock=clock, tags={"v": "first"}
    )
    api.submit(
        tagged(req), request_id=space + "s", store=store, queue=queue, clock=clock, tags={"v": "second"}
    )
    deliver_all(api.worker([tagged], store=store, queue=queue, clock=clock), queue, clock)
    assert record(store, space + "s").tags == {"v": "first"}
    api.run(tagged(req), request_id=space + "r", store=store, tags={"v": "first"})
    assert api.run(tagged(req), request_id=space + "r", store=store, tags={"v": "second"}) == 1
    assert record(store, space + "r").tags == {"v": "first"}
    api.run(tagged(req), request_id=space + "u", store=store)  # untagged first: a tagged copy adds none
    api.run(tagged(req), request_id=space + "u", store=store, tags={"v": "late"})
    assert record(store, space + "u").tags is None


def test_bad_tags_are_refused_before_anything_is_written(store: Store, api: Api) -> None:
    space = new_space()
    queue = MemoryQueue()
    req = {"space": space, "n": 1}
    for n, (tags, said) in enumerate(BAD_TAGS):
        with pytest.raises(InvalidInputError, match="tags") as refused:
            api.submit(tagged(req), request_id=f"{space}s{n}", store=store, queue=queue, tags=tags)
        assert said in str(refused.value)
        with pytest.raises(InvalidInputError, match="tags"):
            api.run(tagged(req), request_id=f"{space}r{n}", store=store, tags=tags)
        assert run_status(store, "tagged", f"{space}s{n}") is None
        assert run_status(store, "tagged", f"{space}r{n}") is None
    assert rows_of(store, space) == {} and queue.approximate_size() == 0
    for bad in ({"customer": 1}, {"": "x"}, [("k", "a"), ("k", "b")]):
        with pytest.raises(InvalidInputError, match="tag"):
            listed(api, store, tags=bad)


def tagged_ops(space: str, count: int) -> list[Op]:
    """Run records of requests ``space + n``: every third carries the tag, every sixth a second
    one too; the rest hold the tag's text in their input only (a listing must not take them)."""
    ops: list[Op] = []
    for n in range(count):
        tags = {"customer": space} if n % 3 == 0 else None
        if n % 6 == 0:
            tags = {"customer": space, "tier": "gold"}
        decoy = {"args": [{"customer": space}], "kwargs": {}}
        started = START + n // 2
        value = RunRecord("f" * 64, RunStatus.RUNNING, input=decoy, started_at=started, tags=tags).to_json()
        ops.append(Insert(run_ref("listed", f"{space}{n:03d}"), value, encode(value)))
    return ops


@pytest.mark.exact_calls  # records are written with plain commits, never resent
def test_a_tag_filter_pages_through_every_request_carrying_it_once(store: Store) -> None:
    """Keyset paging stays exact under a filter: pages of fewer matches than they read, each
    request carrying the tags listed once, in the store's order, and none that only mentions
    them in its input (DynamoDB's server-side filter reads the record's text)."""
    space = new_space()
    write(store, tagged_ops(space, 30))
    wanted = {"customer": space}
    pages = [runs(store, limit=2, tags=wanted)]
    while pages[-1].next is not None:
        pages.append(runs(store, limit=2, tags=wanted, after=pages[-1].next))
        assert len(pages) < 20
    ids = [found.request_id for page in pages for found in page.runs]
    assert sorted(ids) == [f"{space}{n:03d}" for n in range(0, 30, 3)]
    assert all(len(page.runs) == 2 for page in pages[:-1])
    if pages[0].order == "newest first":
        assert ids == [f"{space}{n:03d}" for n in reversed(range(0, 30, 3))]
    gold = runs(store, tags={"tier": "gold", **wanted}, workflow="listed", status=RunStatus.RUNNING)
    assert sorted(found.request_id for found in gold.runs) == [f"{space}{n:03d}" for n in range(0, 30, 6)]
    assert runs(store, tags={"customer": space + "0"}).runs == ()
