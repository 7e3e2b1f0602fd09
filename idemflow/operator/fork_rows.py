"""What a fork keeps of the old request: the steps ``from_step`` may follow, and its rows.

:func:`fork_bounds` checks ``from_step`` against the old request's steps as a replay of its code
read them (:mod:`idemflow.operator.replay`) and returns the memos to copy; :func:`copied_published`
the events and stream values its steps before ``from_step`` published, under the new id.
"""

from __future__ import annotations

from collections.abc import Sequence

from idemflow.errors import ForkStepError, NonDeterminismError
from idemflow.keys import (
    RUNS_TABLE,
    STREAM_END,
    event_key,
    memo_prefix,
    parse_published_key,
    stream_end_key,
    stream_key,
)
from idemflow.operator.replay import Found, Replayed
from idemflow.records import Memo, RunRecord
from idemflow.serialization import JSON
from idemflow.stores.base import Row, RowRef


def fork_bounds(workflow: str, request_id: str, replayed: Replayed, from_step: object) -> list[Found]:
    """The memos of the steps before ``from_step``, once it is known to be a step to fork from.

    Steps are numbered from 1 (``idemflow runs show``); ``from_step`` runs from 1 (every step
    anew) to one past the last step recorded, or, for an aborted request, to the step that
    decided the abort (the steps after it never ran), and must be a step the request recorded
    (as ``runs show`` lists it: not a number a ``uuid4()`` or ``random()`` took), and not after
    a step whose undo ran (the data no longer holds that step). The replay must have reached it without a
    :class:`~idemflow.errors.NonDeterminismError` (one at or after it is what a fork runs anew).

    >>> nothing = Replayed((), None, None, None)
    >>> fork_bounds("wf", "r-1", nothing, 0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.ForkStepError: cannot fork workflow 'wf' request 'r-1' from step 0: ...
    """
    if type(from_step) is not int or from_step < 1:
        why = "steps are numbered from 1 as runs show lists them (from_step=1 runs every step anew)"
        raise ForkStepError(workflow, request_id, from_step, why)
    error = replayed.error
    if isinstance(error, NonDeterminismError) and error.step < from_step:
        raise error
    forward = [found for found in replayed.found if found.tag == "s"]
    last = max((found.number for found in forward), default=0)
    aborts = [found.number for found in forward if _aborted(found.row)]
    upper = min(aborts) if aborts else last + 1
    if from_step > upper:
        ended = f"its abort was decided at step {upper}" if aborts else f"it recorded {last} step(s)"
        raise ForkStepError(workflow, request_id, from_step, f"{ended}: from_step is 1 to {upper}")
    undone = sorted(
        found.number for found in replayed.found if found.tag in "cu" and found.number < from_step
    )
    if undone:
        why = f"step {undone[0]} was undone by the request's abort: fork from step {undone[0]} or earlier"
        raise ForkStepError(workflow, request_id, from_step, why)
    if from_step < upper and from_step not in {found.number for found in forward}:
        why = (
            f"no step is recorded at {from_step} (a uuid4() or random() value, derived from its "
            "number, or a step inside another's numbers): fork from a step runs show lists"
        )
        raise ForkStepError(workflow, request_id, from_step, why)
    return [found for found in forward if found.number < from_step]


def _aborted(row: Row) -> bool:
    memo = Memo.from_json(row.value)
    return memo is not None and memo.aborted


def copied_published(
    workflow: str,
    request_id: str,
    new_id: str,
    scanned: Sequence[tuple[str, str, Row]],
    from_step: int,
) -> list[tuple[RowRef, dict[str, JSON]]]:
    """The events and stream rows the old request's steps before ``from_step`` wrote, keyed for
    ``new_id`` (an event set again at or after ``from_step`` holds that later value: not copied).

    >>> from idemflow.keys import event_key
    >>> rows = [("r-1", event_key("wf", "r-1", "status"), Row({"v": "paid", "n": 2, "at": 1.0}, 1))]
    >>> copied_published("wf", "r-1", "r-2", rows, 3)
    [(RowRef(table='idemflowruns', partition='r-2', key='ewf|r-2|status'), {'v': 'paid', 'n': 2, 'at': 1.0})]
    """
    copied: list[tuple[RowRef, dict[str, JSON]]] = []
    for _, row_key, row in scanned:
        parsed = parse_published_key(row_key)
        value = row.value
        if parsed is None or parsed[:2] != (workflow, request_id) or not isinstance(value, dict):
            continue
        step = value.get("n")
        if type(step) is not int or step >= from_step:
            continue
        key, part = parsed[2], parsed[3]
        if part is None:
            new_key = event_key(workflow, new_id, key)
        elif part == STREAM_END:
            new_key = stream_end_key(workflow, new_id, key)
        else:
            new_key = stream_key(workflow, new_id, key, int(part))
        copied.append((RowRef(RUNS_TABLE, new_id, new_key), dict(value)))
    return copied


def at_places(workflow: str, request_id: str, record: RunRecord) -> list[RowRef]:
    """The memos of the atomic steps its record knows, at every place it names (and the next
    step's): what a replay of the request reads there, read ahead in one batched read.

    >>> record = RunRecord.from_json({"fp": "f", "status": "failed", "pl": [["t", "p"]], "sn": 1})
    >>> [ref.key for ref in at_places("wf", "r-1", record)]
    ['mwf|r-1|s1', 'mwf|r-1|s2']
    """
    places = record.places
    if places is None:
        return []
    prefix = memo_prefix(workflow, request_id)
    numbers = range(1, places.steps + 2)
    return [RowRef(table, partition, f"{prefix}s{n}") for table, partition in places.at for n in numbers]
