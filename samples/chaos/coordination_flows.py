"""The workflows of the coordination workload and their checks (:mod:`samples.chaos.coordination`).

They live apart from the workload so a worker process (``python -m samples.chaos worker
coordination``) imports only what it runs. Every step leaves a row that says how often it was
applied, so the tables alone show a step run twice, a timer that fired early, a child run twice or
without its parent, a message taken twice, out of its sender's order, or lost:

- ``chaos-nap`` records ``now()``, sleeps 0.2-2 s, records ``now()`` again (table ``naps``);
- ``chaos-parent`` starts a ``chaos-kid`` (request id: the parent's + ``.kid``) that sleeps a
  little and then completes or aborts, and records what its child did (table ``kin``);
- ``chaos-sender`` sends 2-4 messages to a ``chaos-receiver``, which receives until it has the
  count it expects, with a short timeout, recording each message as it takes it (table ``mail``).

:func:`invariants` is what holds at every instant (the monitor's check), :func:`check_round` what
holds once every request finished.

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> plan = Plan(naps=[("n1", {"id": "n1", "seconds": 0.01})])
>>> plan.parents.append(("p1", {"id": "p1", "verdict": "abort"}))
>>> _ = run(nap(plan.naps[0][1]), request_id="n1", store=store)
>>> run(parent(plan.parents[0][1]), request_id="p1", store=store)["child"]
'aborted'
>>> invariants(store), check_round(store, plan)
([], [])
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from idemflow import (
    ChildAborted,
    Idem,
    Tx,
    Workflow,
    abort,
    atomic,
    checkpoint,
    now,
    receive,
    send,
    sleep,
    start,
    wait,
)
from idemflow import workflow as define
from idemflow.admin import runs
from idemflow.client import RunStatus, status
from idemflow.keys import INBOX, RUNS_TABLE, inbox_prefix, parse_inbox_key
from idemflow.records import Message
from idemflow.serialization import JSON
from idemflow.stores import Store
from idemflow.testing import data_rows

NAPS, KIN, MAIL = "naps", "kin", "mail"
TABLES = (NAPS, KIN, MAIL)
NAP, PARENT, KID, RECEIVER, SENDER = (
    "chaos-nap",
    "chaos-parent",
    "chaos-kid",
    "chaos-receiver",
    "chaos-sender",
)
OUTSIDE = "idemflow.message"
"""The workflow name of a message sent from outside any workflow (``send_message``)."""
TOPIC = "mail"
GOT, AT = "got:", "at:"
"""A receiver's rows: ``got:<sender>:<n>`` how often it took that message, ``at:<sender>:<n>`` when
(0 for the first message it took)."""
MAX_TIMEOUTS = 200
"""A receiver gives up after this many timeouts in all (then the check finds the messages it did
not take): a bound, so a lost message ends the receiver instead of keeping it waiting forever."""


class NapRequest(TypedDict):
    id: str
    seconds: float


class ParentRequest(TypedDict):
    id: str
    verdict: str
    """``ok`` or ``abort``: what its child does."""


class KidRequest(TypedDict):
    parent: str
    verdict: str
    seconds: float


class ReceiverRequest(TypedDict):
    id: str
    expected: int
    timeout: float


class SenderRequest(TypedDict):
    id: str
    to: str
    count: int
    in_client: bool
    """Without a checkpoint: ``submit`` sends the messages from the client, before returning."""
    pause: float
    """Seconds it sleeps before its first send (its receiver's timeouts then expire meanwhile)."""


def kid_id(parent_id: str) -> str:
    return f"{parent_id}.kid"


def note(sender_id: str, n: int, of: int) -> dict[str, JSON]:
    """The ``n``-th message of a sender that sends ``of``."""
    return {"from": sender_id, "n": n, "of": of}


def _bump(key: str, also: dict[str, JSON] | None = None) -> Callable[[Tx], None]:
    def body(tx: Tx) -> None:
        tx.increment(key)
        for name, value in (also or {}).items():
            tx.put(name, value)

    return body


@define(NAP)
def nap(req: NapRequest) -> Generator[Idem[Any], Any, dict[str, float]]:
    """Two steps around a durable timer; the second's time is a memoized ``now()``, never before
    ``before + seconds``."""
    before: float = yield now()
    yield atomic(NAPS, req["id"], _bump("first", {"before": before, "seconds": req["seconds"]}), name="first")
    yield sleep(req["seconds"])
    after: float = yield now()
    yield atomic(NAPS, req["id"], _bump("second", {"after": after}), name="second")
    return {"before": before, "after": after}


@define(KID)
def kid(req: KidRequest) -> Generator[Idem[Any], Any, dict[str, str]]:
    """One step (undone, once, if it aborts), a short sleep, then the verdict."""
    yield atomic(
        KIN, req["parent"], _bump("kid"), compensate=lambda tx, _: tx.increment("undone"), name="kid"
    )
    yield sleep(req["seconds"])
    if req["verdict"] == "abort":
        yield abort({"kid of": req["parent"], "said": "no"})
    return {"kid of": req["parent"]}


@define(PARENT)
def parent(req: ParentRequest) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    """Starts its child, waits for it (holding no worker meanwhile) and records its outcome."""
    yield checkpoint()
    yield atomic(KIN, req["id"], _bump("before"), name="before")
    verdict = "abort" if req["verdict"] == "abort" else "ok"
    child = yield start(
        kid({"parent": req["id"], "verdict": verdict, "seconds": 0.2}), request_id=kid_id(req["id"])
    )
    outcome: dict[str, JSON]
    try:
        outcome = {"child": "completed", "result": (yield wait(child))}
    except ChildAborted as aborted:
        outcome = {"child": "aborted", "reason": cast(JSON, aborted.reason)}  # what the kid gave abort()
    yield atomic(KIN, req["id"], _bump("after", {"outcome": outcome}), name="after")
    return outcome


@define(RECEIVER)
def receiver(req: ReceiverRequest) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    """Receives until it has ``expected`` messages; a timeout (None) is counted and it goes on."""
    got: list[JSON] = []
    timeouts = 0
    while len(got) < req["expected"] and timeouts < MAX_TIMEOUTS:
        value = yield receive(TOPIC, timeout=req["timeout"])
        if value is None:
            timeouts += 1
            continue
        got.append(value)
        key = f"{value['from']}:{value['n']}"
        yield atomic(MAIL, req["id"], _bump(GOT + key, {AT + key: len(got) - 1}), name="took")
    yield atomic(MAIL, req["id"], _bump("done", {"timeouts": timeouts}), name="done")
    return {"got": got, "timeouts": timeouts}


@define(SENDER)
def sender(req: SenderRequest) -> Generator[Idem[Any], Any, int]:
    """Sends ``count`` messages to its receiver, then says so in the receiver's partition."""
    if not req["in_client"]:
        yield checkpoint()
    if req["pause"]:
        yield sleep(req["pause"])
    for n in range(req["count"]):
        yield send(receiver, req["to"], TOPIC, note(req["id"], n, req["count"]))
    yield atomic(MAIL, req["to"], _bump("sent:" + req["id"]), name="sent")
    return req["count"]


WORKFLOWS: list[Workflow[Any, Any]] = [nap, parent, kid, receiver, sender]


@dataclass
class Plan:
    """The requests of one round (each a request id and its input), and the outside senders: per
    receiver, a sender id and how many messages it sends with ``send_message``."""

    naps: list[tuple[str, NapRequest]] = field(default_factory=list)
    parents: list[tuple[str, ParentRequest]] = field(default_factory=list)
    receivers: list[tuple[str, ReceiverRequest]] = field(default_factory=list)
    senders: list[tuple[str, SenderRequest]] = field(default_factory=list)
    outside: list[tuple[str, str, int]] = field(default_factory=list)
    """``(receiver id, sender id, count)``: message ``n`` goes under the key ``<sender id>.<n>``."""

    def expected(self) -> dict[str, dict[str, int]]:
        """Per receiver: its senders and how many messages each sends."""
        found: dict[str, dict[str, int]] = defaultdict(dict)
        for sid, req in self.senders:
            found[req["to"]][sid] = req["count"]
        for rid, sid, count in self.outside:
            found[rid][sid] = count
        return found

    def requests(self) -> list[tuple[str, str]]:
        """Every ``(workflow, request id)`` of the round, the children and outside sends included."""
        found = [(NAP, rid) for rid, _ in self.naps] + [(RECEIVER, rid) for rid, _ in self.receivers]
        found += [(PARENT, rid) for rid, _ in self.parents] + [(KID, kid_id(rid)) for rid, _ in self.parents]
        found += [(SENDER, rid) for rid, _ in self.senders]
        return found + [(OUTSIDE, f"{sid}.{n}") for _rid, sid, count in self.outside for n in range(count)]


def _partitions(store: Store, table: str) -> dict[str, dict[str, JSON]]:
    found: dict[str, dict[str, JSON]] = defaultdict(dict)
    for (_table, partition, key), value in data_rows(store, table).items():
        found[partition][key] = value
    return found


def _inboxes(store: Store) -> dict[str, list[Message]]:
    """Every message sent to a receiver, taken or not, by receiver id."""
    found: dict[str, list[Message]] = defaultdict(list)
    for _partition, key, row in store.scan(RUNS_TABLE):
        to = parse_inbox_key(key) if key.startswith(INBOX) else None
        if to is not None and to[0] == RECEIVER and key.startswith(inbox_prefix(*to, TOPIC)):
            found[to[1]].append(Message.from_json(row.value))
    return found


def number(value: JSON) -> float:
    """The number a row holds (0 if it holds none: a check then finds the row wrong)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _taken(row: dict[str, JSON]) -> Counter[tuple[str, int]]:
    """How often a receiver took each ``(sender, n)``."""
    got: Counter[tuple[str, int]] = Counter()
    for key, value in row.items():
        if key.startswith(GOT):
            sender_id, n = key[len(GOT) :].rsplit(":", 1)
            got[sender_id, int(n)] += int(number(value))
    return got


def _sent_by(message: Message) -> tuple[str, int] | None:
    value = message.value
    if message.taken or not isinstance(value, dict):
        return None
    return str(value.get("from")), int(number(value.get("n")))


def _once(where: str, row: dict[str, JSON], keys: list[str]) -> list[str]:
    return [f"{where}: {key} applied {row[key]} times" for key in keys if row.get(key, 0) not in (0, 1)]


def invariants(store: Store) -> list[str]:
    """What holds at every instant: no step applied twice, none before the step it follows, no
    timer early, no message taken twice, before an earlier one of its sender, or left waiting
    after it was taken (the data rows are read before the inbox: a receive marks its message
    taken in the commit before the step that records it)."""
    problems: list[str] = []
    for rid, row in _partitions(store, NAPS).items():
        problems += _once(f"nap {rid}", row, ["first", "second"])
        if "second" in row and "first" not in row:
            problems.append(f"nap {rid}: second step without the first")
        due = number(row.get("before")) + number(row.get("seconds"))
        if "after" in row and number(row["after"]) < due:
            problems.append(f"nap {rid}: woke at {row['after']}, {due - number(row['after']):.3f} s early")
    for rid, row in _partitions(store, KIN).items():
        problems += _once(f"parent {rid}", row, ["before", "kid", "undone", "after"])
        for later, earlier in (("kid", "before"), ("undone", "kid"), ("after", "kid")):
            if later in row and earlier not in row:
                problems.append(f"parent {rid}: {later} without {earlier}")
    received: dict[str, Counter[tuple[str, int]]] = {}
    for rid, row in _partitions(store, MAIL).items():
        got = received[rid] = _taken(row)
        for (sender_id, n), times in sorted(got.items()):
            if times > 1:
                problems.append(f"receiver {rid}: message {n} of {sender_id} taken {times} times")
            if n > 0 and (sender_id, n - 1) not in got:
                problems.append(f"receiver {rid}: message {n} of {sender_id} taken before message {n - 1}")
    for rid, messages in _inboxes(store).items():
        waiting = Counter(each for each in map(_sent_by, messages) if each is not None)
        for (sender_id, n), times in sorted(waiting.items()):
            if (sender_id, n) in received.get(rid, {}):
                problems.append(f"receiver {rid}: message {n} of {sender_id} taken and still waiting")
            if times > 1:
                problems.append(f"receiver {rid}: message {n} of {sender_id} waiting {times} times")
    return problems


def check_round(store: Store, plan: Plan) -> list[str]:
    """Once every request finished: each step applied once, each request's result as its rows say,
    each child once and only under a parent, each message taken once in its sender's order, none
    lost (taken + still waiting = sent)."""
    problems = invariants(store)
    naps, kin, mail = (_partitions(store, table) for table in TABLES)
    for rid, nap_req in plan.naps:
        row = naps.get(rid, {})
        if row.get("first") != 1 or row.get("second") != 1:
            problems.append(f"nap {rid}: steps applied {row.get('first')} and {row.get('second')} times")
        if row.get("seconds") != nap_req["seconds"]:
            problems.append(f"nap {rid}: slept {row.get('seconds')} s, asked {nap_req['seconds']} s")
        problems += _result(store, NAP, rid, {"before": row.get("before"), "after": row.get("after")})
    parents = {rid for rid, _ in plan.parents}
    for rid, parent_req in plan.parents:
        problems += _family(store, rid, parent_req["verdict"] == "abort", kin.get(rid, {}))
    children = {kid_id(rid) for rid in parents}
    orphans = [each.request_id for each in runs(store, workflow=KID).runs if each.request_id not in children]
    problems += [f"a child without a parent: {request_id}" for request_id in orphans]
    problems += [f"rows of a parent never submitted: {rid}" for rid in kin if rid not in parents]
    inboxes, expected = _inboxes(store), plan.expected()
    for rid, _req in plan.receivers:
        problems += _mail(store, rid, expected.get(rid, {}), mail.get(rid, {}), inboxes.get(rid, []))
    for sid, sender_req in plan.senders:
        problems += _result(store, SENDER, sid, sender_req["count"])
        applied = mail.get(sender_req["to"], {}).get("sent:" + sid)
        if applied != 1:
            problems.append(f"sender {sid}: last step applied {applied} times")
    for _rid, sid, count in plan.outside:
        problems += [problem for n in range(count) for problem in _result(store, OUTSIDE, f"{sid}.{n}", None)]
    return problems


def _family(store: Store, rid: str, aborts: bool, row: dict[str, JSON]) -> list[str]:
    """A parent's steps once each, its child once (undone if it aborted), the outcome it recorded
    and answered the child's."""
    problems = []
    counts = {key: row.get(key, 0) for key in ("before", "kid", "undone", "after")}
    if counts != {"before": 1, "kid": 1, "undone": 1 if aborts else 0, "after": 1}:
        problems.append(f"parent {rid}: steps applied {counts}")
    child = status(store, KID, kid_id(rid))
    if child.status is not (RunStatus.ABORTED if aborts else RunStatus.COMPLETED):
        problems.append(f"child of {rid}: {child.status.value}, asked to {'abort' if aborts else 'complete'}")
    said: dict[str, JSON] = {"child": "completed", "result": child.result}
    if child.status is RunStatus.ABORTED:
        said = {"child": "aborted", "reason": child.reason}
    if row.get("outcome") != said:
        problems.append(f"parent {rid} recorded {row.get('outcome')}, its child {said}")
    return problems + _result(store, PARENT, rid, said)


def _mail(
    store: Store, rid: str, senders: dict[str, int], row: dict[str, JSON], inbox: list[Message]
) -> list[str]:
    """A receiver took every message sent to it, once, each sender's in order; none left."""
    problems = []
    sent = {(sender_id, n) for sender_id, count in senders.items() for n in range(count)}
    got = set(_taken(row))
    waiting = [message for message in inbox if not message.taken]
    if len(got) + len(waiting) != len(sent) or len(inbox) != len(sent):
        problems.append(
            f"receiver {rid}: {len(got)} taken + {len(waiting)} waiting, {len(inbox)} message rows, "
            f"{len(sent)} sent"
        )
    problems += [f"receiver {rid}: message {n} of {sid} never taken" for sid, n in sorted(sent - got)]
    problems += [f"receiver {rid}: message {n} of {sid} taken, never sent" for sid, n in sorted(got - sent)]
    position = {(sid, n): number(row.get(f"{AT}{sid}:{n}")) for sid, n in got}
    for sid, n in sorted(got):
        if n > 0 and (sid, n - 1) in position and position[sid, n - 1] > position[sid, n]:
            problems.append(f"receiver {rid}: message {n} of {sid} taken before message {n - 1}")
    ordered = [note(sid, n, senders.get(sid, 0)) for sid, n in sorted(got, key=position.__getitem__)]
    problems += _result(store, RECEIVER, rid, {"got": ordered, "timeouts": row.get("timeouts")})
    if row.get("done") != 1:
        problems.append(f"receiver {rid}: last step applied {row.get('done')} times")
    return problems


def _result(store: Store, workflow: str, request_id: str, expected: Any) -> list[str]:
    """The request completed, answering ``expected`` (None: whatever it answered)."""
    found = status(store, workflow, request_id)
    if found.status is not RunStatus.COMPLETED:
        why = found.failure or found.waiting or found.reason or ""
        return [f"{workflow} {request_id}: {found.status.value} {why}"]
    if expected is not None and found.result != expected:
        return [f"{workflow} {request_id}: answered {found.result}, its rows say {expected}"]
    return []
