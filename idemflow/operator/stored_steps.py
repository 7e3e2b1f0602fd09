"""A request's committed steps read from the store alone, without the workflow's code.

Every memo but an atomic step's sits beside the run record, in the request's own partition of
:data:`~idemflow.keys.RUNS_TABLE`: one scan of that partition reads the record, those memos and
the places row a submission's checkpoint left. An atomic step's memo is with its data; the
record and that row name where (:mod:`idemflow.core.places`), and the step numbers not found
beside the record are read there by key, all in one batched read (``read_many``). A request
that is not finished may have committed steps since its record was last written: the next few
numbers are read at the same places, until none is found. What cannot be located (a place not
recorded yet, or an earlier release's record, which names none) is said in a note, never
guessed.

>>> from idemflow import atomic, effect, run, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("order")
... def order(n):
...     yield atomic("stock", "apples", lambda tx: tx.increment("held", n), name="reserve")
...     return (yield effect(lambda key: "ok", name="notify"))
>>> store = MemoryStore()
>>> run(order(2), request_id="o-1", store=store)
'ok'
>>> from idemflow.engine.drive import drive
>>> listed = drive(listed_steps("order", "o-1"), store)
>>> [(step.number, step.kind, step.name, step.table) for step in listed.steps], listed.notes
([(1, 'atomic', 'reserve', 'stock'), (2, 'effect', 'notify', 'idemflowruns')], ())
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from idemflow.core.places import PLACES_TAG, Place, Places, join
from idemflow.core.policy import DEFAULT_POLICY, resent
from idemflow.core.requests import ReadMany, Scan, Steps
from idemflow.engine.memo_reader import WAIT_ENDED
from idemflow.errors import RequestNotFoundError
from idemflow.keys import (
    RUNS_TABLE,
    check_request_id,
    check_workflow_name,
    memo_prefix,
    parse_memo_key,
    run_key,
)
from idemflow.records import Memo, RunRecord, RunStatus, of_earlier_run
from idemflow.serialization import JSON
from idemflow.stores.base import Row, RowRef

PROBE = 4
"""Step numbers past the last one a request's record knows that are looked for at its places
(again while any is found): the steps an unfinished request committed since."""
CHUNK = 500
"""Memo keys one batched read asks for (each store splits it as its backend needs)."""


@dataclass(frozen=True, slots=True)
class StepView:
    """One recorded step: its number, kind and name, where it ran, how it ended and when."""

    number: int
    kind: str
    """``atomic``, ``effect``, ``now``, ``abort``, ``start``, ``wait``, ``receive``, ``compensate`` ..."""
    name: str
    table: str
    partition: str
    outcome: str
    """``committed``, ``aborted`` (the step decided the abort) or ``compensated``."""
    value: JSON
    at: float | None
    """When it committed (epoch seconds), if its memo says (format 4 and later)."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "step": self.number,
            "kind": self.kind,
            "name": self.name,
            "table": self.table,
            "partition": self.partition,
            "outcome": self.outcome,
            "value": self.value,
            "at": self.at,
        }


@dataclass(frozen=True, slots=True)
class Listed:
    """What the store says of a request: its record, its steps in order, and what is not shown."""

    record: RunRecord
    steps: tuple[StepView, ...]
    notes: tuple[str, ...]


Seen = tuple[int, str, "StepView | None"]
"""A memo found: its step number, its tag's letter (``s`` forward, ``c``/``u`` an undo) and its
step (None for a memo holding a place without being a step: a completion's after a timer)."""


def step_of(ref: RowRef, row: Row | None, incarnation: str | None) -> Seen | None:
    """What the memo at ``ref`` records, or None if ``row`` is no step's memo of this run (an
    earlier request with the same id left it, or it is another kind of row)."""
    parsed = parse_memo_key(ref.key)
    if row is None or parsed is None or of_earlier_run(row, incarnation):
        return None
    tag = parsed[2]
    memo = Memo.from_json(row.value)
    if memo is None or not tag[1:].isdigit() or tag[0] not in "scu":
        return None
    number = int(tag[1:])
    if memo.identity == WAIT_ENDED:
        return number, tag[0], None
    kind, _, name = memo.identity.partition(" ")
    outcome = "aborted" if memo.aborted else ("compensated" if tag[0] in "cu" else "committed")
    return (
        number,
        tag[0],
        StepView(number, kind, name, ref.table, ref.partition, outcome, memo.value, memo.at),
    )


def listed_steps(
    workflow: str, request_id: str, scanned: Sequence[tuple[str, str, Row]] | None = None
) -> Steps[Listed]:
    """A request's record and committed steps as its rows tell (reads only, both APIs).

    ``scanned`` is its partition of the runs table if the caller read it already. Raises
    :class:`~idemflow.errors.InvalidInputError` if the store knows no such request."""
    if scanned is None:
        scanned = yield from partition_of(workflow, request_id)
    record = record_in(scanned, workflow, request_id)
    prefix = memo_prefix(workflow, request_id)
    steps: dict[tuple[int, str], StepView] = {}
    located: set[int] = set()
    row_places: Places | None = None
    for partition, key, row in scanned:
        if not key.startswith(prefix):
            continue
        if key == prefix + PLACES_TAG:
            row_places = Places.from_fields(row.value) if isinstance(row.value, dict) else None
            continue
        _keep(steps, located, step_of(RowRef(RUNS_TABLE, partition, key), row, record.incarnation))
    places = join(record.places, row_places)
    last = max([places.steps if places else 0, *located, *_stopped_before(record)])
    if places is not None:
        yield from _read_at(
            places.at,
            [n for n in range(1, last + 1) if n not in located],
            "s",
            prefix,
            record,
            steps,
            located,
        )
        while not record.status.final:  # steps since the record was written, at the same places
            before = len(located)
            yield from _read_at(
                places.at, range(last + 1, last + 1 + PROBE), "s", prefix, record, steps, located
            )
            if len(located) == before:
                break
            last = max(located)
        if record.status is not RunStatus.COMPLETED:  # undone or being undone: the compensations
            atomic = [view for view in steps.values() if view.kind == "atomic"]
            yield from _compensations(atomic, prefix, record, steps, located)
    folded = record.status is RunStatus.COMPLETED and not located  # its only step: no memo kept
    if folded and places is not None and len(places.at) == 1:
        ((table, partition),) = places.at
        at = record.finished_at
        steps[places.steps, "s"] = StepView(
            places.steps, "atomic", "", table, partition, "committed", None, at
        )
        located.add(places.steps)
    ordered = sorted(steps.values(), key=lambda step: (step.outcome == "compensated", step.number))
    notes = _notes(record, places, last, located, bool(ordered), folded)
    return Listed(record, tuple(ordered), tuple(notes))


def partition_of(workflow: str, request_id: str) -> Steps[list[tuple[str, str, Row]]]:
    """The request's partition of the runs table (its run record, the memos beside it, its
    messages), names checked first."""
    check_workflow_name(workflow)
    check_request_id(request_id)
    rows: Iterable[tuple[str, str, Row]] = yield from resent(
        DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), Scan(RUNS_TABLE, request_id)
    )
    return list(rows)


def record_in(scanned: Sequence[tuple[str, str, Row]], workflow: str, request_id: str) -> RunRecord:
    """The run record in a request's partition, or :class:`~idemflow.errors.RequestNotFoundError`
    (an :class:`~idemflow.errors.InvalidInputError`)."""
    wanted = run_key(workflow)
    found = next((row for _, key, row in scanned if key == wanted), None)
    if found is None:
        raise RequestNotFoundError(
            f"no request {request_id!r} of workflow {workflow!r} is known to this store"
        )
    return RunRecord.from_json(found.value)


def _keep(steps: dict[tuple[int, str], StepView], located: set[int], seen: Seen | None) -> None:
    """Add a memo found (the first one found of a step and tag stays)."""
    if seen is None:
        return
    number, tag, view = seen
    if tag == "s":
        located.add(number)
    if view is not None:
        steps.setdefault((number, tag), view)


def _stopped_before(record: RunRecord) -> list[int]:
    """The steps a failed or retried request is known to have committed: those before its step."""
    stopped = [record.failure.step - 1] if record.failure is not None else []
    if record.attempts is not None:
        stopped.append(record.attempts.step - 1)
    return stopped


def _read_at(
    places: Sequence[Place],
    numbers: Iterable[int],
    kind: str,
    prefix: str,
    record: RunRecord,
    steps: dict[tuple[int, str], StepView],
    located: set[int],
) -> Steps[None]:
    """Read the memos of ``numbers`` at every place in ``places``, keeping those found."""
    refs = [RowRef(table, partition, f"{prefix}{kind}{n}") for n in numbers for table, partition in places]
    yield from _read(refs, record, steps, located)


def _compensations(
    atomic: list[StepView],
    prefix: str,
    record: RunRecord,
    steps: dict[tuple[int, str], StepView],
    located: set[int],
) -> Steps[None]:
    """The undos of the atomic steps found, each beside its step's memo (``c<n>``)."""
    refs = [RowRef(view.table, view.partition, f"{prefix}c{view.number}") for view in atomic]
    yield from _read(refs, record, steps, located)


def _read(
    refs: list[RowRef], record: RunRecord, steps: dict[tuple[int, str], StepView], located: set[int]
) -> Steps[None]:
    for start in range(0, len(refs), CHUNK):
        chunk = refs[start : start + CHUNK]
        rows: list[Any] = yield from resent(DEFAULT_POLICY.resending(DEFAULT_POLICY.until()), ReadMany(chunk))
        for ref, row in zip(chunk, rows, strict=True):
            _keep(steps, located, step_of(ref, row, record.incarnation))


FOLDED = (
    "its only step committed with its outcome, whose record took the place of the step's memo "
    "(one write fewer): the step's name and value are not kept"
)


def _notes(
    record: RunRecord, places: Places | None, last: int, located: set[int], any_step: bool, folded: bool
) -> list[str]:
    """What the listing cannot show, in words."""
    missing = [n for n in range(1, last + 1) if n not in located]
    running = not record.status.final
    if places is None:
        if not missing and any_step:
            return []
        where = f" ({_numbers(missing)} among them)" if missing else ""
        why = "an earlier release's record"
        if running:
            why += ", or none written since the request's claim"
        elif folded:
            why += ", or its only step committed with its outcome, whose record took its memo's place"
        later = "; its code (--workflows) replays them" if running else ""
        return [f"atomic steps are not listed{where}: the run record names no place of them ({why}){later}"]
    notes = [FOLDED] if folded else []
    if missing:
        maybe = ", or a step in a place not recorded yet" if running else ""
        notes.append(
            f"{_numbers(missing)}: no memo at the places recorded: a uuid4() or random() "
            f"(derived from its number, never stored){maybe}"
        )
    if not places.complete:
        notes.append("the request used more places than its record names: steps there are not listed")
    return notes


def _numbers(numbers: list[int]) -> str:
    """``step 3`` or ``steps 1, 3`` (the first 20, and how many more)."""
    shown = ", ".join(str(n) for n in numbers[:20])
    more = f" and {len(numbers) - 20} more" if len(numbers) > 20 else ""
    return ("step " if len(numbers) == 1 else "steps ") + shown + more
