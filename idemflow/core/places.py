"""Where a request's atomic steps keep their memos: what a listing without the workflow's code reads.

An atomic step's memo lives with its data, in the table and partition the step wrote (every
other step's memo sits beside the run record, in the request's own partition of
:data:`~idemflow.keys.RUNS_TABLE`). No read can list a request's memos across partitions, so the
writes a request already makes name those places as they go: the completion record, the record
rewrites of a request that waits or fails under a worker, and, at a submission's checkpoint, the
places row beside the record (``m<workflow>|<request>|j``). Each holds ``pl``, the
``[table, partition]`` pairs in the order the request first used them, and ``sn``, the highest
number of an atomic step the writer had met (every other step's memo is found beside the
record, whatever its number); ``plm`` says the request used more places than a record
keeps (:data:`MAX_PLACES`), those after the first ones unnamed. A request with no atomic step
writes none of it, byte for byte the rows it wrote before places were kept.

Writers know the places from what they already hold: the engine's journal (the completion
record), a checkpoint's journal entries (``submit``), and the rows a worker's delivery or a
``run`` met (:func:`idemflow.stores.long_waits.watched`), which name every memo the execution read or
wrote. A later writer's places include every earlier one's (its replay passed every step), so a
reader joins whatever it finds (:meth:`Places.joined`).

>>> places = Places.of([("accounts", "alice"), ("ledger", "2024"), ("accounts", "alice")], 3)
>>> places.to_fields()
{'pl': [['accounts', 'alice'], ['ledger', '2024']], 'sn': 3}
>>> Places.from_fields({"pl": [["accounts", "alice"]], "sn": 2}).joined(places).at
(('accounts', 'alice'), ('ledger', '2024'))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from idemflow.core.ops import Put
from idemflow.core.row import RowRef
from idemflow.keys import RUNS_TABLE, memo_prefix, parse_memo_key
from idemflow.serialization import JSON, encode

PLACES_TAG = "j"
"""The memo-space tag of the places row a submission writes at its checkpoint (beside the run
record: collected, kept and extended with the request's other memos, never read as a step)."""

MAX_PLACES = 64
"""Places a record names at most: a request spreading its steps over more partitions (a fan-out
loop) keeps the first ones, and ``plm`` says the others are not named."""
MAX_PLACE_CHARS = 4000
"""Characters of table and partition names a record spends on places at most (a completion
record must stay well inside the backend's item limit, whatever the result beside it)."""

Place = tuple[str, str]
"""``(table, partition)``: where a step's data and memo are."""


@dataclass(frozen=True, slots=True)
class Places:
    """The places of a request's atomic steps as one writer knew them, and how far it had got."""

    at: tuple[Place, ...]
    """``(table, partition)`` of each, in the order the request first used them."""
    steps: int
    """The highest number of an atomic step the writer had met: a step up to it with no memo
    beside the run record has its memo at one of :attr:`at`."""
    complete: bool = True
    """False: the request used more places than :data:`MAX_PLACES` (or :data:`MAX_PLACE_CHARS`)
    allow, and those are not named."""

    @classmethod
    def of(cls, at: Iterable[Place], steps: int, complete: bool = True) -> Places | None:
        """The places ``at`` (duplicates dropped, capped), or None if there are none."""
        kept: dict[Place, None] = {}
        chars = 0
        for place in at:
            if place in kept:
                continue
            chars += len(place[0]) + len(place[1])
            if len(kept) >= MAX_PLACES or chars > MAX_PLACE_CHARS:
                complete = False
                break
            kept[place] = None
        if not kept:
            return None
        return cls(tuple(kept), steps, complete)

    def to_fields(self) -> dict[str, JSON]:
        """The fields a run record (or the places row) holds them in."""
        fields: dict[str, JSON] = {
            "pl": [[table, partition] for table, partition in self.at],
            "sn": self.steps,
        }
        if not self.complete:
            fields["plm"] = True
        return fields

    @classmethod
    def from_fields(cls, value: Mapping[str, Any]) -> Places | None:
        """The places a record or places row holds, or None (none written, or not readable)."""
        raw = value.get("pl")
        if not isinstance(raw, list):
            return None
        at = []
        for pair in raw:  # a loop, not all() over a generator: read with every run record
            if isinstance(pair, list) and len(pair) == 2:
                table, partition = pair
                if isinstance(table, str) and isinstance(partition, str):
                    at.append((str(table), str(partition)))
        steps = value.get("sn")
        return cls.of(at, steps if type(steps) is int else 0, value.get("plm") is not True)

    def joined(self, other: Places | None) -> Places:
        """Both writers' places: ``self``'s first, then those only ``other`` knew."""
        if other is None or other == self:
            return self
        return (
            Places.of((*self.at, *other.at), max(self.steps, other.steps), self.complete and other.complete)
            or self
        )


def join(*found: Places | None) -> Places | None:
    """Every writer's places joined (None if none wrote any).

    >>> join(None, Places.of([("t", "p")], 1), None).at
    (('t', 'p'),)
    """
    joined: Places | None = None
    for places in found:
        if places is not None:
            joined = places if joined is None else joined.joined(places)
    return joined


def from_journal(entries: Iterable[tuple[str, str, str]]) -> Places | None:
    """The places of a journal's forward steps (``(table, partition, identity)``, step 1 first):
    what a submission knows at its checkpoint or wait.

    >>> entries = [("accounts", "alice", "atomic debit"), ("idemflowruns", "r-1", "now")]
    >>> from_journal(entries).to_fields()
    {'pl': [['accounts', 'alice']], 'sn': 1}
    """
    atomic = [(n, (t, p)) for n, (t, p, _) in enumerate(entries, 1) if t and t != RUNS_TABLE]
    return Places.of((place for _, place in atomic), max((n for n, _ in atomic), default=0))


def from_rows(refs: Iterable[RowRef], workflow: str, request_id: str) -> Places | None:
    """The places of the memos of a request among ``refs``, the rows an execution met (see
    :func:`idemflow.stores.long_waits.watched`), and the highest number of an atomic step among them.

    >>> met = [RowRef("accounts", "a", "mpay|r|s2"), RowRef("accounts", "a", "dbalance")]
    >>> from_rows(met, "pay", "r").to_fields()
    {'pl': [['accounts', 'a']], 'sn': 2}
    """
    prefix = memo_prefix(workflow, request_id)
    at: list[Place] = []
    steps = 0
    for ref in sorted(refs, key=_step_order(prefix)):
        if not ref.key.startswith(prefix):
            continue
        if ref.table == RUNS_TABLE:
            continue
        tag = ref.key[len(prefix) :]
        if tag[:1] == "s" and tag[1:].isdigit():
            steps = max(steps, int(tag[1:]))
        at.append((ref.table, ref.partition))
    return Places.of(at, steps)


def _step_order(prefix: str) -> Any:
    """Memo rows by step number (a set of rows met has no order of its own), anything else last."""

    def key(ref: RowRef) -> tuple[int, str, str, str]:
        tag = ref.key[len(prefix) :] if ref.key.startswith(prefix) else ""
        number = int(tag[1:]) if tag[1:].isdigit() else 1 << 62
        return number, ref.table, ref.partition, ref.key

    return key


def is_places_row(key: str) -> bool:
    """Whether a row key is a places row (a submission's checkpoint wrote it), not a step's memo.

    >>> is_places_row(places_ref("pay", "r-1").key), is_places_row("mpay|r-1|s1")
    (True, False)
    """
    parsed = parse_memo_key(key)
    return parsed is not None and parsed[2] == PLACES_TAG


def places_ref(workflow: str, request_id: str) -> RowRef:
    """Where a submission's checkpoint writes the places of the steps before it.

    >>> places_ref("pay", "r-1")
    RowRef(table='idemflowruns', partition='r-1', key='mpay|r-1|j')
    """
    return RowRef(RUNS_TABLE, request_id, memo_prefix(workflow, request_id) + PLACES_TAG)


def places_row(places: Places, workflow: str, request_id: str, expires_at: float) -> Put:
    """The places row a submission's checkpoint writes (blind: a later writer knows more, and a
    reader joins it with the run record's places).

    >>> places_row(Places.of([("t", "p")], 1), "pay", "r-1", 0.0).text
    '{"pl":[["t","p"]],"sn":1}'
    """
    value: JSON = places.to_fields()
    return Put(places_ref(workflow, request_id), value, encode(value), expires_at=expires_at)
