"""idemflow.azure_functions: the queue-triggered worker and the timer-triggered relay on Azurite.

The functions are registered on azure-functions' own ``FunctionApp`` and run by
:class:`tests.support.azure_host.FunctionsHost`, which does what the Functions host does with them
(receive, call with a ``func.QueueMessage``, delete, release, poison); the requests are submitted
with idemflow's ``submit`` onto the Azure queue and their effects counted in Azure tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient

from idemflow import Idem, atomic, checkpoint, open_store, sleep, workflow
from idemflow.admin import dead_letters, redrive
from idemflow.async_worklist.queues.azure_queue import AzureQueue
from idemflow.azure_functions import message_of, queue_function, register, timer_function
from idemflow.client import RunStatus, status, submit
from idemflow.errors import ConfigurationError, DeliveryRetryError, InvalidInputError, QueueError
from idemflow.integrations.azure_host import fold_poison
from idemflow.stores.base import CommitOutcome, Store
from idemflow.testing.servers import Azurite
from idemflow.worker import open_queue
from tests.conftest import TEST_TABLES, store_url
from tests.support.async_workflows import survey
from tests.support.azure_host import Crash, FunctionsHost, HostSettings
from tests.support.lambda_functions import WORKFLOWS, PoisonedReads
from tests.support.workflows import rows_of

KEY = "azure-functions-test-key"
SETTING = "IDEMFLOW_TEST_STORAGE"
ANSWERS = ("red", "green", "blue")

pytestmark = pytest.mark.cloud


@pytest.fixture
def cloud(
    azurite: Azurite, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A fresh store and queue on Azurite, the app setting the queue trigger names, a space."""
    prefix = f"f{uuid.uuid4().hex[:8]}"
    store = open_store(store_url("azure", request, prefix))
    store.create_tables(*TEST_TABLES)
    queue = AzureQueue(prefix, connection_string=azurite.connection_string)
    monkeypatch.setenv(SETTING, azurite.connection_string)
    url = azurite.queue_url(prefix, Path("."), visibility_timeout=30)
    return {"store": store, "queue": queue, "url": url, "space": prefix + "-"}


def app_of(cloud: dict[str, Any], store: Any = None, **options: Any) -> tuple[func.FunctionApp, Any]:
    app = func.FunctionApp()
    registered = register(
        app,
        WORKFLOWS,
        store=cloud["store"] if store is None else store,
        queue=cloud["url"],
        connection=SETTING,
        signing_key=KEY,
        **options,
    )
    return app, registered


def submit_surveys(cloud: dict[str, Any], names: list[str], queue: Any = None, **options: Any) -> list[str]:
    ids = []
    for n, name in enumerate(names):
        request_id = cloud["space"] + name
        response = {"space": cloud["space"], "user": name, "answer": ANSWERS[n % 3], "at": [1]}
        submit(
            survey(response),
            request_id=request_id,
            store=cloud["store"],
            queue=queue or cloud["queue"],
            signing_key=KEY,
            **options,
        )
        ids.append(request_id)
    return ids


def counted(cloud: dict[str, Any]) -> dict[str, Any]:
    rows = rows_of(cloud["store"], cloud["space"])
    return {
        key: value for (table, part, key), value in rows.items() if table == "tableb" and "summary" in part
    }


def state(cloud: dict[str, Any], request_id: str) -> RunStatus:
    return status(cloud["store"], "survey", request_id).status


def drain(host: FunctionsHost, *, polls: int = 40, hold: float = 30.0) -> Counter[str]:
    """Poll until a poll finds nothing; what the function calls came to."""
    total: Counter[str] = Counter()
    for _ in range(polls):
        polled = host.poll(hold=hold)
        if not polled.outcomes:
            return total
        total.update(polled.outcomes)
    raise AssertionError(f"the queue did not drain: {total}")


def test_every_request_completes_once(cloud: dict[str, Any]) -> None:
    names = [f"u{n}" for n in range(24)]
    ids = submit_surveys(cloud, names)
    submit_surveys(cloud, names[::4])  # copies of submitted requests: they enqueue nothing
    app, registered = app_of(cloud)
    outcomes = drain(FunctionsHost(app))
    assert outcomes == Counter(deleted=24)
    assert all(state(cloud, request_id) is RunStatus.COMPLETED for request_id in ids)
    assert counted(cloud) == {"red": 8, "green": 8, "blue": 8}
    assert registered.worker.stats.completed == 24
    assert cloud["queue"].approximate_size() == 0


class CrashAfterCount:
    """A real store whose first commit of a count dies right after it is written (the answer lost)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.crashed = 0

    def commit(self, ops: Any) -> CommitOutcome:
        outcome = self._store.commit(ops)
        touched = {op.ref.partition for op in ops}
        if not self.crashed and any(part.endswith("summary") for part in touched):
            self.crashed += 1
            raise Crash
        return outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_message_delivered_again_after_a_crash_has_one_effect(cloud: dict[str, Any]) -> None:
    [request_id] = submit_surveys(cloud, ["u0"])
    crashing = CrashAfterCount(cloud["store"])
    app, _ = app_of(cloud, store=crashing)
    host = FunctionsHost(app)
    assert host.poll(hold=1).outcomes == Counter(crashed=1)  # the count was committed, then it died
    assert crashing.crashed == 1 and state(cloud, request_id) is RunStatus.RUNNING
    # Back after the hold lapsed (delivery 2): finished, but the host dies before its delete.
    assert host.poll(hold=1, settle=False, wait=5).outcomes == Counter(unsettled=1)
    assert state(cloud, request_id) is RunStatus.COMPLETED
    assert host.poll(wait=5).outcomes == Counter(deleted=1)  # delivery 3: a duplicate, deleted
    assert drain(host) == Counter()
    assert counted(cloud) == {"red": 1}
    assert crashing.crashed == 1


def test_a_failing_message_raises_and_the_others_finish(cloud: dict[str, Any]) -> None:
    ids = submit_surveys(cloud, ["ok0", "poison", "ok1"])
    app, _ = app_of(cloud, store=PoisonedReads(cloud["store"]))
    host = FunctionsHost(app, HostSettings(max_dequeue_count=5))
    polled = host.poll()
    assert polled.outcomes == Counter(deleted=2, DeliveryRetryError=1)
    [error] = polled.errors
    assert isinstance(error, DeliveryRetryError) and error.deliveries == 1
    assert [state(cloud, i) for i in ids] == [RunStatus.COMPLETED, RunStatus.RUNNING, RunStatus.COMPLETED]
    [back] = host.queue.receive_messages(visibility_timeout=1)  # released: visible again, counted
    assert back.dequeue_count == 2


def test_past_max_dequeue_count_a_message_is_poisoned_then_dead_lettered_and_redriven(
    cloud: dict[str, Any],
) -> None:
    [request_id] = submit_surveys(cloud, ["poison"])
    settings = HostSettings(max_dequeue_count=3)
    app, registered = app_of(cloud, store=PoisonedReads(cloud["store"]))
    host = FunctionsHost(app, settings)
    assert drain(host) == Counter(DeliveryRetryError=3)  # the third failure moved it
    assert len(host.poisoned()) == 1 and state(cloud, request_id) is RunStatus.RUNNING
    assert fold_poison(cloud["queue"], time.monotonic()) == (0, False)  # no time left: left there
    assert registered.relay() == {"relayed": 0, "poisoned": 1, "finished": True}
    assert host.poisoned() == []
    [letter] = dead_letters(cloud["queue"])
    assert letter.reason.startswith("poison: ")
    assert redrive(cloud["queue"]) == 1  # once the store is healthy again
    healthy, _ = app_of(cloud)
    assert drain(FunctionsHost(healthy, settings)) == Counter(deleted=1)
    assert state(cloud, request_id) is RunStatus.COMPLETED
    assert counted(cloud) == {"red": 1}


def test_an_unheld_workflow_fails_at_max_deliveries_before_the_host_poisons_it(cloud: dict[str, Any]) -> None:
    [request_id] = submit_surveys(cloud, ["u0"])
    app = func.FunctionApp()
    register(
        app,
        [],
        store=cloud["store"],
        queue=cloud["url"],
        connection=SETTING,
        signing_key=KEY,
        max_deliveries=3,
    )
    outcomes = drain(FunctionsHost(app, HostSettings(max_dequeue_count=3)))
    assert outcomes == Counter(DeliveryRetryError=2, deleted=1)  # idemflow ended it on delivery 3
    assert state(cloud, request_id) is RunStatus.FAILED


@workflow("napper")
def napper(space: str) -> Generator[Idem[Any], Any, Any]:
    yield checkpoint()
    yield sleep(1)  # a durable timer: no function waits for it
    return (yield atomic("tablea", space + "naps", lambda tx: tx.increment("naps"), name="nap"))


def test_a_timer_is_a_fresh_delayed_message_and_the_function_returns(cloud: dict[str, Any]) -> None:
    request_id = cloud["space"] + "n0"
    submit(
        napper(cloud["space"]),
        request_id=request_id,
        store=cloud["store"],
        queue=cloud["queue"],
        signing_key=KEY,
    )
    app = func.FunctionApp()
    register(app, [napper], store=cloud["store"], queue=cloud["url"], connection=SETTING, signing_key=KEY)
    host = FunctionsHost(app)
    assert host.poll().outcomes == Counter(deleted=1)  # suspended at the sleep: returned, not raised
    assert status(cloud["store"], "napper", request_id).status is RunStatus.RUNNING
    polled = host.poll(wait=10)  # the fresh message, visible once the timer is due
    assert polled.outcomes == Counter(deleted=1) and polled.deliveries == [1]  # waiting never counts
    assert status(cloud["store"], "napper", request_id).status is RunStatus.COMPLETED
    assert rows_of(cloud["store"], cloud["space"])[("tablea", "naps", "naps")] == 1


def test_a_laned_queue_is_refused_from_its_url_alone(cloud: dict[str, Any], azurite: Azurite) -> None:
    """A trigger binds one queue: ``?lanes=true`` is a ConfigurationError naming the lanes' queues,
    raised before anything is opened (no lane's queue is created) or added to the app."""
    prefix = cloud["queue"].name
    laned = azurite.queue_url(f"{prefix}x", Path("."), visibility_timeout=30) + "&lanes=true"
    names = f"{prefix}x-high, {prefix}x and {prefix}x-low"
    with pytest.raises(ConfigurationError, match=names):
        queue_function(WORKFLOWS, store=cloud["store"], queue=laned)
    app = func.FunctionApp()
    with pytest.raises(ConfigurationError, match="register one function per lane"):
        register(app, WORKFLOWS, store=cloud["store"], queue=laned, connection=SETTING)
    assert app.get_functions() == []
    with pytest.raises(ConfigurationError, match="binds one queue"):
        timer_function(store=cloud["store"], queue=laned)
    with pytest.raises(ConfigurationError, match="binds one queue"):
        queue_function(WORKFLOWS, store=cloud["store"], queue=open_queue("memory:?lanes=true"))
    with pytest.raises(InvalidInputError, match="Azure queue name"):  # a wrong name is told first
        queue_function(WORKFLOWS, store=cloud["store"], queue="azure-queue:Orders?lanes=true")
    for name in (f"{prefix}x-high", f"{prefix}x", f"{prefix}x-low"):
        with pytest.raises(ResourceNotFoundError):
            QueueClient.from_connection_string(azurite.connection_string, name).get_queue_properties()


def test_one_function_per_lane_keeps_each_request_on_its_lane(
    cloud: dict[str, Any], azurite: Azurite
) -> None:
    """``register`` once per lane, each with the lane's queue URL: a high request's timer comes back
    on the high queue (the high function alone finishes it), a low one's on the low queue."""
    prefix = cloud["queue"].name
    lanes = {"high": f"{prefix}-high", "normal": prefix, "low": f"{prefix}-low"}
    laned = open_queue(cloud["url"] + "&lanes=true")  # the submitter's view; creates the three queues
    app = func.FunctionApp()
    for lane, name in lanes.items():
        url = azurite.queue_url(name, Path("."), visibility_timeout=30)
        options = {"connection": SETTING, "signing_key": KEY, "name": f"idemflow_{lane}"}
        register(app, [napper], store=cloud["store"], queue=url, **options)
    functions = app.get_functions()
    hosts = {lane: FunctionsHost(None, name=f"idemflow_{lane}", functions=functions) for lane in lanes}
    assert {lane: host.queue_name for lane, host in hosts.items()} == lanes
    ids = {lane: cloud["space"] + lane for lane in ("high", "low")}
    for lane, request_id in ids.items():
        options = {"store": cloud["store"], "queue": laned, "signing_key": KEY, "priority": lane}
        submit(napper(cloud["space"] + lane), request_id=request_id, **options)
    for lane, request_id in ids.items():
        host = hosts[lane]
        assert host.poll().outcomes == Counter(deleted=1)  # suspended at its sleep
        assert status(cloud["store"], "napper", request_id).status is RunStatus.RUNNING
        polled = host.poll(wait=10)  # the timer's fresh message, on this lane's queue
        assert polled.outcomes == Counter(deleted=1) and polled.deliveries == [1]
        assert status(cloud["store"], "napper", request_id).status is RunStatus.COMPLETED
    assert all(drain(host) == Counter() for host in hosts.values())  # nothing went to another lane
    rows = rows_of(cloud["store"], cloud["space"])
    assert [rows[("tablea", lane + "naps", "naps")] for lane in ids] == [1, 1]


def test_a_malformed_message_is_dead_lettered_and_deleted(cloud: dict[str, Any]) -> None:
    cloud["queue"].send("not a continuation")
    app, registered = app_of(cloud)
    assert drain(FunctionsHost(app)) == Counter(deleted=1)
    [letter] = dead_letters(cloud["queue"])
    assert letter.body == "not a continuation" and letter.reason.startswith("rejected:")
    assert registered.worker.stats.dead_lettered == 1


class _Down:
    """A queue whose sends fail, as during an outage (or a process killed before the send)."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise QueueError("injected: the queue is down")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def test_the_timer_relays_a_request_whose_pointer_was_never_sent(cloud: dict[str, Any]) -> None:
    [request_id] = submit_surveys(cloud, ["u0"], queue=_Down(cloud["queue"]), grace=0.0)
    app, registered = app_of(cloud)
    host = FunctionsHost(app)
    assert drain(host) == Counter()  # nothing was sent: only the outbox holds the continuation
    host.tick()  # as the host runs it: the relay's answer goes to the log
    assert drain(host) == Counter(deleted=1)
    assert state(cloud, request_id) is RunStatus.COMPLETED
    assert registered.relay() == {"relayed": 0, "poisoned": 0, "finished": True}


def test_the_registered_functions_are_what_the_host_indexes(cloud: dict[str, Any]) -> None:
    app, _ = app_of(cloud, name="survey", schedule="0 */5 * * * *")
    host = FunctionsHost(app)  # loads both as the Python worker would: names and annotations match
    bindings = {f.get_function_name(): f.get_trigger().get_dict_repr() for f in host.functions}
    assert set(bindings) == {"survey_worker", "survey_relay"}
    queued, timed = bindings["survey_worker"], bindings["survey_relay"]
    assert (queued["type"], queued["queueName"], queued["connection"]) == (
        "queueTrigger",
        cloud["queue"].name,
        SETTING,
    )
    assert (timed["type"], timed["schedule"], timed["runOnStartup"]) == (
        "timerTrigger",
        "0 */5 * * * *",
        False,
    )


def test_wrong_wiring_is_refused_before_anything_runs(cloud: dict[str, Any], tmp_path: Path) -> None:
    def attempt(**changes: Any) -> None:
        options = {"store": cloud["store"], "queue": cloud["url"], "connection": SETTING, **changes}
        register(func.FunctionApp(), WORKFLOWS, **options)

    with pytest.raises(InvalidInputError, match="Azure queue"):
        attempt(queue=f"sqlite:{tmp_path / 'q.sqlite3'}?name=jobs")
    with pytest.raises(InvalidInputError, match="Azure queue name"):
        attempt(queue="azure-queue:Orders")  # Azure queue names are lowercase
    with pytest.raises(InvalidInputError, match="NCRONTAB"):
        attempt(schedule="*/1 * * * *")  # five fields: the host wants six
    with pytest.raises(InvalidInputError, match="name"):
        attempt(name="9lives")
    with pytest.raises(InvalidInputError, match="app setting"):
        attempt(connection="")
    with pytest.raises(InvalidInputError, match="budget"):
        attempt(budget=0)
    with pytest.raises(TypeError, match="@workflow"):
        queue_function([len], store=cloud["store"], queue=cloud["url"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="Azure queue"):
        timer_function(store=cloud["store"], queue=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="takes a func"):
        message_of("a body")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="dequeue_count"):
        message_of(func.QueueMessage(id="m", body="{}", pop_receipt="r"))


def test_loading_the_module_imports_no_sdk() -> None:
    code = (
        "import sys, idemflow.azure_functions\n"
        "print(sorted(m for m in sys.modules if m.startswith(('boto', 'azure'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
