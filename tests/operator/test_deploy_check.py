"""``admin.check_deploy`` / ``acheck_deploy`` and ``idemflow check-deploy``: the open requests
replayed on new code, reading only, on every store and both APIs."""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import (
    Idem,
    InvalidInputError,
    StepRetry,
    atomic,
    checkpoint,
    effect,
    receive,
    sleep,
    start,
    wait,
    workflow,
)
from idemflow.admin import DeployCheck, acheck_deploy, check_deploy
from idemflow.client import RunStatus, send_message, status, submit
from idemflow.stores import SqliteStore, Store
from idemflow.worker import MemoryQueue, Worker
from tests.cli.test_cli import idemflow
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import LOOP, async_twin
from tests.support.no_writes import AsyncNoWrites, NoWrites


def step(name: str, space: str) -> Idem[Any]:
    return atomic("tablea", space + "w", lambda tx: tx.increment(name), name=name)


def pay_v1(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield step("reserve", req["space"])
    yield checkpoint()
    yield effect(lambda key: key[:6], name="charge")
    if req.get("fail"):
        yield atomic("tablea", req["space"] + "w", _broken, name="settle")
    confirmed = yield receive("confirm")
    yield step("settle", req["space"])
    return confirmed


def _broken(tx: Any) -> None:
    raise ValueError("no stock")


def pay_renamed(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield step("hold", req["space"])  # was "reserve": every request past step 1 would refuse it
    yield checkpoint()
    yield effect(lambda key: key[:6], name="charge")


def pay_later_changed(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield step("reserve", req["space"])
    yield checkpoint()
    yield effect(lambda key: key[:6], name="charge")
    if req.get("fail"):
        yield atomic("tablea", req["space"] + "w", _broken, name="settle")
    confirmed = yield receive("confirm")
    yield step("finish", req["space"])  # after every recorded step: nothing refuses it
    return confirmed


def nap(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield step("before", req["space"])
    yield checkpoint()
    yield sleep(3600)
    yield step("after", req["space"])


def nap_changed(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield step("ahead", req["space"])  # was "before"
    yield checkpoint()
    yield sleep(3600)


def child(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield checkpoint()
    return (yield receive("go"))


def parent(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield checkpoint()
    started = yield start(CHILD(req), request_id=req["space"] + "child")
    return (yield wait(started))


RETRY = StepRetry(initial=1, maximum_attempts=1)
PAY = workflow("deploy-pay", retry=RETRY)(pay_v1)
PAY_V2 = workflow("deploy-pay", version=2)(pay_v1)
NAP = workflow("deploy-nap")(nap)
CHILD = workflow("deploy-child")(child)
PARENT = workflow("deploy-parent")(parent)
FLOWS = [PAY, NAP, CHILD, PARENT]


def open_requests(store: Store) -> tuple[str, Clock, MemoryQueue]:
    """Requests in every open state: at a checkpoint, waiting for a message, failed, sleeping on
    a timer, a parent waiting for its child; and a completed one, which is not checked."""
    space, clock = new_space(), Clock()
    queue, aside = MemoryQueue(clock=clock), MemoryQueue(clock=clock)
    submit(PAY({"space": space}), request_id=space + "queued", store=store, queue=aside, clock=clock)
    for suffix, extra in (("waiting", {}), ("failed", {"fail": True}), ("done", {})):
        submit(
            PAY({"space": space, **extra}), request_id=space + suffix, store=store, queue=queue, clock=clock
        )
    worker = Worker(FLOWS, store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, settled=lambda: True)
    send_message(store, "deploy-pay", space + "done", "confirm", "yes", key="k", queue=queue)
    submit(NAP({"space": space}), request_id=space + "nap", store=store, queue=queue, clock=clock)
    submit(PARENT({"space": space}), request_id=space + "parent", store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, settled=lambda: True)
    states = {
        suffix: status(store, "deploy-pay", space + suffix).status
        for suffix in ("queued", "waiting", "failed", "done")
    }
    assert states == {
        "queued": RunStatus.RUNNING,
        "waiting": RunStatus.RUNNING,
        "failed": RunStatus.FAILED,
        "done": RunStatus.COMPLETED,
    }, states
    assert status(store, "deploy-nap", space + "nap").waiting is not None
    assert status(store, "deploy-parent", space + "parent").waiting is not None
    assert status(store, "deploy-child", space + "child").waiting is not None
    return space, clock, queue


@pytest.fixture(params=["blocking", "asyncio"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def checked(flavour: str, store: Store, flows: list[Any], **options: Any) -> tuple[DeployCheck, NoWrites]:
    """check-deploy on the API under test, over the store wrapped so that any write fails."""
    if flavour == "blocking":
        reading = NoWrites(store)
        return check_deploy(reading, flows, **options), reading  # type: ignore[arg-type]
    awaited = AsyncNoWrites(async_twin(store))
    return LOOP.run(acheck_deploy(awaited, flows, **options)), awaited  # type: ignore[arg-type]


def ours(found: DeployCheck, space: str) -> set[tuple[str, str, str, int | None]]:
    return {
        (p.workflow, p.request_id[len(space) :], p.kind, p.step)
        for p in found.problems
        if p.request_id.startswith(space)
    }


def test_the_same_code_passes_and_a_changed_step_is_found_without_a_write(store: Store, flavour: str) -> None:
    space, _, _ = open_requests(store)
    same, reading = checked(flavour, store, FLOWS)
    assert same.ok and same.checked >= 6 and ours(same, space) == set()
    assert reading.calls["commit"] == reading.calls["commit_cache"] == 0
    assert reading.calls["read_many"] >= 1  # the replays' reads, batched
    renamed = [
        workflow("deploy-pay", retry=RETRY)(pay_renamed),
        workflow("deploy-nap")(nap_changed),
        CHILD,
        PARENT,
    ]
    found, _ = checked(flavour, store, renamed)
    assert not found.ok
    assert ours(found, space) == {
        ("deploy-pay", "queued", "non_determinism", 1),
        ("deploy-pay", "waiting", "non_determinism", 1),
        ("deploy-pay", "failed", "non_determinism", 1),
        ("deploy-nap", "nap", "non_determinism", 1),
    }
    (problem,) = [p for p in found.problems if p.request_id == space + "waiting"]
    assert (problem.recorded, problem.met, problem.version) == ("'atomic reserve'", "'atomic hold'", 1)
    assert problem.line() == (
        f"deploy-pay v1 {space}waiting: step 1 recorded 'atomic reserve' but the code meets 'atomic hold'"
    )


def test_code_changed_only_after_the_recorded_steps_passes(store: Store, flavour: str) -> None:
    space, _, _ = open_requests(store)
    later = [workflow("deploy-pay", retry=RETRY)(pay_later_changed), NAP, CHILD, PARENT]
    found, _ = checked(flavour, store, later, workflow="deploy-pay")
    assert ours(found, space) == set() and found.checked >= 3
    with pytest.raises(InvalidInputError, match="no workflow 'deploy-none'"):  # before any read
        checked(flavour, store, later, workflow="deploy-none")


def test_a_removed_version_is_listed(store: Store, flavour: str) -> None:
    space, _, _ = open_requests(store)
    found, _ = checked(flavour, store, [PAY_V2, NAP, CHILD, PARENT])
    assert ours(found, space) == {
        ("deploy-pay", "queued", "version_not_held", None),
        ("deploy-pay", "waiting", "version_not_held", None),
        ("deploy-pay", "failed", "version_not_held", None),
    }
    assert "version 1 is not in the code given (it holds 2)" in found.problems[0].detail


def test_many_open_requests_are_checked_a_page_at_a_time(store: Store) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    for n in range(7):
        submit(PAY({"space": space}), request_id=f"{space}{n}", store=store, queue=queue, clock=clock)
    reading = NoWrites(store)
    found = check_deploy(reading, [workflow("deploy-pay")(pay_renamed)], page=3)  # type: ignore[arg-type]
    assert {p.request_id for p in found.problems} >= {f"{space}{n}" for n in range(7)}


def test_the_cli_exits_non_zero_when_a_request_would_break(tmp_path: Path) -> None:
    module = tmp_path / "deploy_flows.py"
    root = str(Path(__file__).resolve().parents[2])
    module.write_text(
        f"import sys\nsys.path.insert(0, {root!r})\n"
        "from idemflow import workflow\n"
        "from tests.operator.test_deploy_check import FLOWS, pay_renamed\n"
        "RENAMED = [workflow('deploy-pay')(pay_renamed)]\n"
    )
    path = tmp_path / "deploy.sqlite3"
    store = SqliteStore(path)
    submit(PAY({"space": "s"}), request_id="p-1", store=store, queue=MemoryQueue())
    store.close()
    url = f"sqlite:{path}"
    good = idemflow("check-deploy", "--store", url, "--workflows", "deploy_flows:FLOWS", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "1 open request(s) replayed: none would break" in good.stdout
    bad = idemflow(
        "check-deploy", "--store", url, "--workflows", "deploy_flows:RENAMED", "--json", cwd=tmp_path
    )
    assert bad.returncode == 1, bad.stderr
    shown = json.loads(bad.stdout)
    assert shown["ok"] is False and shown["problems"][0]["step"] == 1
    assert shown["problems"][0]["recorded"] == "'atomic reserve'"
