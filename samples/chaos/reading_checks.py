"""The checks of the reading workload (:mod:`samples.chaos.reading`): while it runs and at its end.

What the readers saw (:class:`Seen`, filled by the driver's reader threads with ``get_event`` and
``read_stream``), the provider's books (:class:`~samples.chaos.reading_provider.Books`) and the
store are held against the plan:

- **events**: a reader never sees a job's (or its kid's) ``stage`` go back or take a value the job
  never sets; a completed job's last value is its last stage;
- **streams**: read from offset 0 while workers are killed, a completed job's stream is complete,
  in order, each value once; a cancelled job's is a prefix of it; read again at the end, the
  store holds what the reader read;
- **all_of**: no branch made twice (one key per ``(request, branch)`` at the provider), no call
  made for a request of no job, every completed job's three quotes made and answered as the
  provider recorded them;
- **any_of**: the nudge won where the client sent it before the sleep's end, the sleep where none
  was sent;
- **cancel**: a cancelled job ends ``cancelled`` (``result()`` raising ``RequestCancelledError``),
  its kid too (it was started and waits for the job, so it cannot have finished first); every
  other job and kid completed.

>>> seen = Seen()
>>> seen.saw_event("j-1", "j-1 1 streaming #3")
>>> seen.saw_event("j-1", "j-1 0 started #3")
>>> seen.problems
['j-1: event went back from stage 1 to stage 0']
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from idemflow import IdemflowError, RequestCancelledError
from idemflow.admin import show
from idemflow.client import Pending, RunStatus, get_event, read_stream, status
from idemflow.errors import StreamTimeoutError
from idemflow.stores import Store
from samples.chaos import reading_flows as flows
from samples.chaos.reading_provider import Books, Provider


def stage_of(value: object) -> int | None:
    """The stage number in a ``stage`` value (None: not one the workflows set)."""
    parts = value.split(" ") if isinstance(value, str) else []
    return int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None


@dataclass
class Seen:
    """What the round's readers saw, per request id (thread-safe: every reader writes here)."""

    events: dict[str, list[str]] = field(default_factory=dict)
    """The distinct values of each request's ``stage`` event, in the order they were read."""
    tokens: dict[str, list[str]] = field(default_factory=dict)
    """What the stream's reader read, in order."""
    ended: set[str] = field(default_factory=set)
    """The streams read to their end."""
    resumed: int = 0
    """Times a stream's reader timed out and read on from the offset it was given."""
    nudged: dict[str, float] = field(default_factory=dict)
    """When (``time.time()``) the client's nudge was accepted, per job (after it was sent)."""
    tried: dict[str, float] = field(default_factory=dict)
    """When the client began to send it (before it was sent)."""
    cancelled: dict[str, str] = field(default_factory=dict)
    """The status each cancelled job had when the cancel was decided (``cancel``'s answer)."""
    missed: set[str] = field(default_factory=set)
    """Kids the first cascade of their job's cancel did not cancel (a later run of it did)."""
    at_cancel: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per cancelled job, its stage and its stream's length read right after ``cancel`` returned:
    a worker inside the job goes on with its local steps (events, stream values) until its next
    outside call, so the job may have published more by its end (counted, not a problem)."""
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def saw_event(self, request_id: str, value: object) -> None:
        """A reader read ``value``: a new one must be a later stage than the last one read."""
        with self._lock:
            read = self.events.setdefault(request_id, [])
            if read and read[-1] == value:
                return
            before, now = (stage_of(read[-1]) if read else -1), stage_of(value)
            if now is None or not isinstance(value, str):
                self.problems.append(f"{request_id}: event {value!r} is no stage of it")
                return
            if before is not None and now < before:
                self.problems.append(f"{request_id}: event went back from stage {before} to stage {now}")
            read.append(value)

    def saw_token(self, request_id: str, value: object) -> None:
        with self._lock:
            self.tokens.setdefault(request_id, []).append(str(value))

    def note(self, problem: str) -> None:
        with self._lock:
            self.problems.append(problem)


def invariants(provider: Provider, jobs: list[flows.JobRequest]) -> Callable[[Store], list[str]]:
    """What holds at every instant (the monitor's check): no branch made twice, no call for a
    request of no job, each event a stage of its job no earlier than the monitor saw before,
    each stream a prefix of what its job writes (read from offset 0, each value once, in order)."""
    last: dict[str, int] = {}
    by_id = {req["id"]: req for req in jobs}

    def check(store: Store) -> list[str]:
        problems = _books(provider.books(), by_id)
        for rid, req in by_id.items():
            value = get_event(store, flows.JOB, rid, flows.STAGE, timeout=0)
            if value is None:
                continue
            now = stage_of(value) if value in flows.stages(req) else None
            if now is None:
                problems.append(f"{rid}: event {value!r} is no stage of it")
            elif now < last.get(rid, -1):
                problems.append(f"{rid}: event went back from stage {last[rid]} to stage {now}")
            else:
                last[rid] = now
                problems += _prefix(rid, req, stored_stream(store, rid, wait=0.0))
        return problems

    return check


def _books(books: Books, jobs: dict[str, flows.JobRequest]) -> list[str]:
    problems = []
    for (request, branch), keys in sorted(books.keys_of().items()):
        if request not in jobs or branch not in flows.BRANCHES:
            problems.append(f"quote {branch} made for {request}, no job of the round")
        if len(keys) > 1:
            problems.append(f"{request}: quote {branch} made {len(keys)} times (keys {keys})")
    return problems


def stored_stream(store: Store, request_id: str, wait: float) -> list[object]:
    """The stream as stored, from offset 0: what is there now (an open stream stops after ``wait``)."""
    read: list[object] = []
    with contextlib.suppress(StreamTimeoutError):
        read.extend(read_stream(store, flows.JOB, request_id, flows.TOKENS, timeout=wait))
    return read


def _prefix(rid: str, req: flows.JobRequest, read: list[object]) -> list[str]:
    wanted = [flows.token(req, n) for n in range(req["values"])]
    if read != wanted[: len(read)]:
        return [f"{rid}: stream read {read}, the job writes {wanted}"]
    return []


@dataclass(frozen=True)
class Verdict:
    problems: list[str]
    ends: dict[str, int]
    """How many jobs ended how."""
    nudges_won: int
    sleeps_won: int
    kids_cancelled: int
    went_on: int = 0
    """Cancelled jobs that published more (a later stage, more values) after ``cancel`` returned."""
    nudges_late: int = 0
    """Completed jobs of the plan's nudged ones whose nudge went only after their sleep ended (or
    never: the reader saw them wait too late), so the sleep won: what the round could not test."""


def check_round(store: Store, jobs: list[flows.JobRequest], seen: Seen, books: Books) -> Verdict:
    """Once every request ended: the module's docstring, in full."""
    by_id = {req["id"]: req for req in jobs}
    problems = [*seen.problems, *_books(books, by_id)]
    ends: dict[str, int] = {}
    won = [0, 0, 0]
    kids = went_on = 0
    for req in jobs:
        rid = req["id"]
        found = status(store, flows.JOB, rid)
        ended = found.status.value
        if rid in seen.cancelled and found.status is RunStatus.COMPLETED:
            ended = "completed first"  # it completed before the cancel landed: cancel said so
        ends[ended] = ends.get(ended, 0) + 1
        problems += _events(store, req, seen, found.status)
        problems += _read(store, req, seen, found.status)
        if found.status is RunStatus.CANCELLED:
            problems += _cancelled(store, req, seen)
            went_on += _went_on(store, req, seen)
            kids += req["kid"] and status(store, flows.KID, flows.kid_id(rid)).status is RunStatus.CANCELLED
            continue
        if found.status is not RunStatus.COMPLETED:
            why = found.failure or found.waiting or found.reason or ""
            problems.append(f"{rid}: {found.status.value} {why}")
            continue
        if rid in seen.cancelled and seen.cancelled[rid] != RunStatus.COMPLETED.value:
            problems.append(f"{rid}: completed, though cancel answered {seen.cancelled[rid]}")
        result = found.result if isinstance(found.result, dict) else {}
        problems += _quotes(rid, result.get("quotes"), books)
        sent = (seen.tried.get(rid), seen.nudged.get(rid))
        problems += decided(req, result, sleep_due(store, rid), sent, won)
        problems += _kid_done(store, req, result.get("kid"))
    return Verdict(problems, ends, won[0], won[1], kids, went_on, won[2])


def _events(store: Store, req: flows.JobRequest, seen: Seen, ended: RunStatus) -> list[str]:
    rid, said = req["id"], flows.stages(req)
    last = get_event(store, flows.JOB, rid, flows.STAGE, timeout=0)
    read = seen.events.get(rid, [])
    problems = [f"{rid}: the reader read {value!r}, no stage of it" for value in read if value not in said]
    if ended is RunStatus.COMPLETED and last != said[-1]:
        problems.append(f"{rid}: completed with its event at {last!r}, not {said[-1]!r}")
    if last is None and ended is RunStatus.CANCELLED and not read:
        return problems  # cancelled before its first step
    if last not in said:
        problems.append(f"{rid}: its event is {last!r}, no stage of it")
    elif read and (stage_of(read[-1]) or 0) > said.index(last):
        problems.append(f"{rid}: the reader read {read[-1]!r}, the event is back at {last!r}")
    if ended is RunStatus.COMPLETED and (not read or read[-1] != said[-1]):
        problems.append(f"{rid}: completed, its reader's last read {read[-1:]}, not {said[-1]!r}")
    kid_said = flows.kid_stages({"parent": rid, "mark": req["mark"]})
    strays = [value for value in seen.events.get(flows.kid_id(rid), []) if value not in kid_said]
    return problems + [f"{rid}.kid: the reader read {value!r}, no stage of it" for value in strays]


def _read(store: Store, req: flows.JobRequest, seen: Seen, ended: RunStatus) -> list[str]:
    """The reader's stream: complete for a completed job, a prefix for a cancelled one; the
    stream stored holds it (read again now, from offset 0)."""
    rid = req["id"]
    read = seen.tokens.get(rid, [])
    problems = _prefix(rid, req, list(read))
    stored = stored_stream(store, rid, wait=0.0)
    if ended is RunStatus.COMPLETED:
        if rid not in seen.ended or len(read) != req["values"]:
            problems.append(f"{rid}: the reader read {len(read)} of {req['values']} values")
        if len(stored) != req["values"]:
            problems.append(f"{rid}: {len(stored)} values stored, {req['values']} written")
    if stored[: len(read)] != read:
        problems.append(f"{rid}: the reader read {read}, the store holds {stored}")
    return problems + _prefix(rid, req, stored)


def _quotes(rid: str, quotes: object, books: Books) -> list[str]:
    """The three quotes made once each and answered as the provider's books say."""
    keys = books.keys_of()
    made = {branch: books.made[found[0]] for (r, branch), found in keys.items() if r == rid}
    answered = quotes if isinstance(quotes, list) else []
    problems = []
    for n, branch in enumerate(flows.BRANCHES):
        quote = made.get(branch)
        if quote is None:
            problems.append(f"{rid}: completed, but its quote {branch} was never made")
            continue
        got = answered[n] if n < len(answered) else None
        if not isinstance(got, dict) or got.get("quote") != quote.serial or got.get("branch") != branch:
            problems.append(f"{rid}: quote {branch} answered {got}, the provider made #{quote.serial}")
    return problems


def sleep_due(store: Store, rid: str) -> float | None:
    """The due time the job's ``any_of`` memoized for its sleep (listed without the code), or None
    if it has none: the nudge was there when the block first ran, before the sleep began."""
    steps = show(store, None, flows.JOB, rid).steps
    dues = [step.value for step in steps if step.kind == "sleep" and isinstance(step.value, int | float)]
    return float(dues[0]) if dues else None


def decided(
    req: flows.JobRequest,
    result: Mapping[str, object],
    due: float | None,
    sent: tuple[float | None, float | None],
    won: list[int],
) -> list[str]:
    """The nudge won if it was sent before the sleep ended, else the sleep. ``due``: the sleep's
    memoized due time (None: none was memoized, the nudge won as the block began; the sleep's
    time counts from when its step is first reached, so a job whose worker died between ``now()``
    and the sleep's step sleeps from its replay); ``sent``: when the client began to send the nudge
    and when it was accepted (None: never); ``won`` counts nudges, sleeps and late nudges.

    >>> req = flows.job_request("j", values=1, mark=1, kid=False, nudged=True, quick=True)
    >>> decided(req, {"took": 0, "message": "nudge j"}, 10.0, (11.0, 11.1), [0, 0, 0])
    ['j: the nudge won, though it was sent 1.00 s after the sleep ended']
    >>> decided(req, {"took": 1}, 10.0, (9.0, 9.5), [0, 0, 0])
    ['j: the sleep won, though the nudge was sent 0.50 s before it ended']
    """
    rid, took = req["id"], result.get("took")
    tried, accepted = sent
    ends = math.inf if due is None else due
    if took == 0:
        won[0] += 1
        if result.get("message") != flows.nudge_of(rid):
            return [f"{rid}: the nudge won with {result.get('message')!r}"]
        if accepted is None:
            return [f"{rid}: a nudge won, but none was sent"]
        if tried is not None and tried > ends:
            return [f"{rid}: the nudge won, though it was sent {tried - ends:.2f} s after the sleep ended"]
        return []
    won[1] += took == 1
    if took != 1:
        return [f"{rid}: any_of answered {took!r}"]
    if took == 1 and due is None:
        return [f"{rid}: the sleep won, but no due time of it was memoized"]
    if accepted is not None and accepted < ends:
        return [f"{rid}: the sleep won, though the nudge was sent {ends - accepted:.2f} s before it ended"]
    won[2] += req["nudged"]
    return []


def _kid_done(store: Store, req: flows.JobRequest, said: object) -> list[str]:
    if not req["kid"]:
        return []
    rid = req["id"]
    kid = status(store, flows.KID, flows.kid_id(rid))
    if kid.status is not RunStatus.COMPLETED:
        return [f"{rid}: completed, its kid {kid.status.value} {kid.reason or ''}"]
    problems = [] if said == kid.result else [f"{rid}: its kid said {said}, its result is {kid.result}"]
    last = get_event(store, flows.KID, flows.kid_id(rid), flows.STAGE, timeout=0)
    wanted = flows.kid_stages({"parent": rid, "mark": req["mark"]})[-1]
    return problems + ([] if last == wanted else [f"{rid}: its kid's event is {last!r}, not {wanted!r}"])


def _went_on(store: Store, req: flows.JobRequest, seen: Seen) -> bool:
    """Whether the job published more after its cancel returned than it had by then."""
    stage, length = seen.at_cancel.get(req["id"], (len(flows.STAGE_NAMES), req["values"]))
    last = stage_of(get_event(store, flows.JOB, req["id"], flows.STAGE, timeout=0))
    return (last if last is not None else -1) > stage or len(stored_stream(store, req["id"], 0.0)) > length


def _cancelled(store: Store, req: flows.JobRequest, seen: Seen) -> list[str]:
    """A cancelled job's handle raises at once; its kid, if it was started, is cancelled too."""
    rid = req["id"]
    problems = [] if rid in seen.cancelled else [f"{rid}: cancelled, but no one cancelled it"]
    for workflow, request_id in [(flows.JOB, rid), (flows.KID, flows.kid_id(rid))]:
        found = status(store, workflow, request_id)
        if workflow == flows.KID and (not req["kid"] or found.status is RunStatus.UNKNOWN):
            continue  # no kid, or cancelled before its start committed
        if found.status is not RunStatus.CANCELLED:
            problems.append(f"{request_id}: {found.status.value} under a cancelled job")
            continue
        try:
            Pending(store, workflow, request_id).result(timeout=5.0)
        except RequestCancelledError:
            continue
        except (IdemflowError, TimeoutError) as other:
            problems.append(
                f"{request_id}: result() raised {type(other).__name__}, not RequestCancelledError"
            )
            continue
        problems.append(f"{request_id}: result() answered, though cancelled")
    return problems
