"""What :func:`~idemflow.testing.check_workflow` reports: outcomes, snapshots and readable traces.

Why a trace and not a bare ``assert a == b``: a divergence found under the
fifth crash point of the third input is only useful if it says which
scenario, which fault at which commit (and what that commit wrote), what the
executions did, and how the result and the tables differ from the
failure-free run.

>>> expected = Snapshot(Outcome("completed", 1), {("t", "p", "k"): 1}, frozenset())
>>> actual = Snapshot(Outcome("completed", 1), {("t", "p", "k"): 2}, frozenset())
>>> print("\\n".join(diff_snapshots(expected, actual)))
  tables differ:
    ~ t/p/'k': expected 1, actual 2
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from idemflow.keys import DATA, MEMO, RUN, parse_memo_key
from idemflow.serialization import JSON
from idemflow.stores.base import Check, Cond, Delete, Increment, Insert, Op, Put

RowKey = tuple[str, str, str]
"""``(table, partition, key)`` of a row."""

MAX_DIFF_LINES = 20


def short(value: object, limit: int = 80) -> str:
    """A value as compact JSON (or repr), cut to ``limit`` characters.

    >>> short({"b": [1, 2], "a": "x"})
    '{"a": "x", "b": [1, 2]}'
    """
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one execution of a request ended: ``completed`` with its result,
    ``aborted`` with its reason, or ``error`` with the exception's type and message.

    >>> str(Outcome("aborted", "insufficient funds"))
    'aborted "insufficient funds"'
    """

    status: str
    value: JSON

    def __str__(self) -> str:
        return f"{self.status} {short(self.value, 200)}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scenario left: its outcome, every data row, and the keys of every
    memo and run record (values left out: ``now()`` and effects may differ harmlessly).

    >>> Snapshot(Outcome("completed", None), {}, frozenset()).rows
    {}
    """

    outcome: Outcome
    rows: dict[RowKey, JSON]
    bookkeeping: frozenset[RowKey]


@dataclass(frozen=True, slots=True)
class Divergence:
    """A scenario whose outcome or tables differ from the failure-free run.

    ``events`` lists what happened, in order (executions, injected faults with
    the operations of the commit they hit); :attr:`trace` is the readable form.

    >>> snap = Snapshot(Outcome("completed", 1), {}, frozenset())
    >>> d = Divergence("w", {"n": 1}, "r-0", "rerun", ("execution 1: completed 2",), snap,
    ...                Snapshot(Outcome("completed", 2), {}, frozenset()))
    >>> print(d.trace)  # doctest: +NORMALIZE_WHITESPACE
    workflow 'w' diverged from its failure-free run
      input: {"n": 1}  (request id 'r-0')
      scenario: rerun
      what happened:
        execution 1: completed 2
      result differs:
        expected completed 1
        actual   completed 2
    """

    workflow: str
    input: object
    request_id: str
    scenario: str
    events: tuple[str, ...]
    expected: Snapshot
    actual: Snapshot
    hint: str = ""

    @property
    def trace(self) -> str:
        """Several lines: scenario, events, expected vs actual result and table diff."""
        lines = [
            f"workflow {self.workflow!r} diverged from its failure-free run",
            f"  input: {short(self.input, 200)}  (request id {self.request_id!r})",
            f"  scenario: {self.scenario}",
            "  what happened:",
            *(f"    {line}" for event in self.events for line in event.splitlines()),
            *diff_snapshots(self.expected, self.actual),
        ]
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.trace


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The verdict of :func:`~idemflow.testing.check_workflow`.

    ``ok`` is True when every scenario matched the failure-free run;
    ``first_divergence`` holds the first one that did not (checking stops there).

    >>> report = CheckReport("w", ok=True, scenarios=12, inputs=2)
    >>> str(report)
    "workflow 'w': 12 scenarios over 2 inputs, all equal to one failure-free run"
    >>> report.raise_on_failure()
    """

    workflow: str
    ok: bool
    scenarios: int
    inputs: int
    first_divergence: Divergence | None = None
    skipped: tuple[str, ...] = field(default=())
    """Scenario families not run, each with the reason."""

    def raise_on_failure(self) -> None:
        """Raise ``AssertionError`` with the trace of the first divergence (for tests)."""
        if self.first_divergence is not None:
            raise AssertionError(self.first_divergence.trace)

    def __str__(self) -> str:
        if self.first_divergence is not None:
            return self.first_divergence.trace
        inputs = "1 input" if self.inputs == 1 else f"{self.inputs} inputs"
        text = (
            f"workflow {self.workflow!r}: {self.scenarios} scenarios over {inputs}, "
            "all equal to one failure-free run"
        )
        return text + "".join(f"\n  skipped: {reason}" for reason in self.skipped)


def diff_snapshots(expected: Snapshot, actual: Snapshot) -> list[str]:
    """Readable differences of result, data rows and bookkeeping keys (empty if equal).

    >>> same = Snapshot(Outcome("completed", 1), {}, frozenset())
    >>> diff_snapshots(same, same)
    []
    """
    lines: list[str] = []
    if expected.outcome != actual.outcome:
        lines += ["  result differs:", f"    expected {expected.outcome}", f"    actual   {actual.outcome}"]
    rows = _diff_rows(expected.rows, actual.rows)
    if rows:
        lines += ["  tables differ:", *rows]
    missing = sorted(expected.bookkeeping - actual.bookkeeping)
    extra = sorted(actual.bookkeeping - expected.bookkeeping)
    if missing or extra:
        lines.append("  memo / run-record rows differ (another path through the steps was taken):")
        lines += [f"    - {_where(ref)} missing" for ref in missing[:MAX_DIFF_LINES]]
        lines += [f"    + {_where(ref)} extra" for ref in extra[:MAX_DIFF_LINES]]
    return lines


def _diff_rows(expected: dict[RowKey, JSON], actual: dict[RowKey, JSON]) -> list[str]:
    lines = []
    for ref in sorted(set(expected) | set(actual)):
        table, partition, key = ref
        where = f"{table}/{partition}/{key!r}"
        if ref not in actual:
            lines.append(f"    - {where} = {short(expected[ref])} missing")
        elif ref not in expected:
            lines.append(f"    + {where} = {short(actual[ref])} extra")
        elif expected[ref] != actual[ref]:
            lines.append(f"    ~ {where}: expected {short(expected[ref])}, actual {short(actual[ref])}")
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"    … and {len(lines) - MAX_DIFF_LINES} more"]
    return lines


def _where(ref: RowKey) -> str:
    table, partition, key = ref
    return f"{table}/{partition} {describe_key(key)}"


def describe_key(key: str) -> str:
    """A stored row key in words: a user row, a step's memo or a run record.

    >>> describe_key("dbalance"), describe_key("mtransfer|t-1|s2"), describe_key("rtransfer")
    ("row 'balance'", "memo s2 of transfer/'t-1'", "run record of 'transfer'")
    """
    if key.startswith(DATA):
        return f"row {key[1:]!r}"
    if key.startswith(MEMO):
        parsed = parse_memo_key(key)
        if parsed is not None:
            workflow, request_id, tag = parsed
            return f"memo {tag} of {workflow}/{request_id!r}"
    if key.startswith(RUN):
        return f"run record of {key[1:]!r}"
    return f"key {key!r}"


def _shown(op: Insert) -> object:
    """A row's value as a reader wants it: a memo without its run's incarnation (random, and the
    same in every memo of a run: it only tells runs of one request id apart)."""
    value = op.value
    if isinstance(value, dict) and "i" in value and parse_memo_key(op.ref.key) is not None:
        return {name: field for name, field in value.items() if name != "i"}
    return value


def describe_op(op: Op) -> str:
    """One store operation in words, with its table, partition, key and condition.

    >>> from idemflow.stores.base import RowRef
    >>> describe_op(Increment(RowRef("accounts", "bob", "dbalance"), 5))
    "increment accounts/bob row 'balance' by 5"
    """
    where = f"{op.ref.table}/{op.ref.partition} {describe_key(op.ref.key)}"
    if isinstance(op, Insert):
        if op.ref.key.startswith(RUN) and isinstance(op.value, dict):
            return f"insert {where} (status {op.value.get('status')})"
        return f"insert {where} = {short(_shown(op), 60)}"
    if isinstance(op, Increment):
        return f"increment {where} by {op.delta}"
    expect = ""
    if op.expect is Cond.ABSENT:
        expect = " (if absent)"
    elif op.expect is not Cond.ANY:
        expect = f" (if still version {short(op.expect, 30)})"
    if isinstance(op, Put):
        return f"put {where} = {short(op.value, 60)}{expect}"
    if isinstance(op, Delete):
        return f"delete {where}{expect}"
    assert isinstance(op, Check)
    return f"check {where}{expect}"


def describe_commit(ops: Sequence[Op]) -> str:
    """A commit as one line per operation (indented), for traces.

    >>> from idemflow.stores.base import RowRef
    >>> print(describe_commit([Increment(RowRef("t", "p", "dn"), 1)]))
      increment t/p row 'n' by 1
    """
    return "\n".join(f"  {describe_op(op)}" for op in ops)
