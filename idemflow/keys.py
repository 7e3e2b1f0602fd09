"""Key spaces: where data rows, memo rows and run records live.

Every row key starts with one character naming its space, so no user key can
reach a memo or bookkeeping row, whatever characters it holds:

- ``d<key>`` a user's data row (the key as given);
- ``m<workflow>|<request>|<tag>`` a step's memo, in the same table and
  partition as the step's data; ``<tag>`` is ``s<n>`` for forward step ``n``
  and ``c<n>`` for the compensation of step ``n``; ``j``, beside the run record, is the
  places row a submission's checkpoint writes (:mod:`idemflow.core.places`);
- ``r<workflow>`` the run record, in the :data:`RUNS_TABLE` table under
  partition ``<request id>``; steps with no table of their own (``now()``,
  ``effect``) keep their memos beside it;
- ``o<workflow>|<request>`` an outbox entry (a submitted continuation that is
  due), in one of the :data:`OUTBOX_SHARDS` partitions ``outbox.<n>`` of
  :data:`RUNS_TABLE` (a request id equal to such a name shares the partition
  but never a key: its rows start with ``r`` and ``m``);
  ``o<workflow>|<request>|w<cause>`` a wake-up of that request (a child
  finished, a message arrived), one per cause, so no writer deletes another's;
- ``q<workflow>|<request>|<topic>|<sender>`` a message sent to a request,
  beside its run record; a ``receive`` marks it taken in the same commit as
  its memo (``<sender>`` names the sending step: a resent send meets it).
- ``l<kind>|<name>|slots`` and ``|bucket`` a concurrency or rate limit's state, in the
  ``limits`` partition of :data:`RUNS_TABLE` (:mod:`idemflow.limits.slots`).
- ``e<workflow>|<request>|<key>`` an event a request set (``set_event``), beside its run record:
  one point read fetches it;
- ``t<workflow>|<request>|<key>|<offset>`` the value a request wrote at ``offset`` of a stream
  (``write_stream``; the offset in ten digits, so a stream sorts in order), and
  ``t<workflow>|<request>|<key>|end`` where ``close_stream`` ended it, beside its run record: a
  reader reads a page of offsets in one ``read_many``.
- ``s<schedule>`` a schedule's state (paused, the last tick fired), in the
  :data:`SCHEDULES_PARTITION` partition of :data:`RUNS_TABLE`
  (:mod:`idemflow.core.schedule_state`); no request's row starts with ``s``.

Workflow names and request ids are escaped (``%`` → ``%25``, ``|`` → ``%7C``)
so the ``|`` separators are unambiguous: the encoding is injective.

>>> memo_key("transfer", "a|b", step_tag(3))
'mtransfer|a%7Cb|s3'
>>> data_key("m-not-a-memo")
'dm-not-a-memo'
"""

from __future__ import annotations

import hashlib
import math
import re

from idemflow.errors import InvalidInputError, InvalidNameError

RUNS_TABLE = "idemflowruns"
"""Logical table holding run records and table-less step memos."""

_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{2,39}")
_WORKFLOW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,99}")
MAX_ID_CHARS = 255
MAX_KEY_CHARS = 512

DATA, MEMO, RUN, OUTBOX, INBOX, LIMIT = "d", "m", "r", "o", "q", "l"
EVENT, STREAM = "e", "t"
SCHEDULE = "s"
STREAM_END = "end"
"""The last part of the key of a stream's end (``close_stream``): after every offset's digits."""
OFFSET_DIGITS = 10
"""Digits of a stream value's offset in its key: every offset a stream can reach sorts in order."""
MAX_PUBLISHED_KEY_CHARS = 100
"""Longest event or stream key (as a message's topic): it is part of row keys and step identities."""

LIMITS_PARTITION = "limits"
"""The :data:`RUNS_TABLE` partition of flow-control rows (``l<kind>|<name>|<part>``): one partition,
so a request taking several limits takes them in one atomic commit on every backend."""

SCHEDULES_PARTITION = "schedules"
"""The :data:`RUNS_TABLE` partition of schedules' state rows (``s<schedule>``): ``idemflow schedules
list`` reads every schedule's row in one batched read of one partition."""

OUTBOX_SHARDS = 16
"""Partitions the outbox is spread over (no hot partition; a relay reads each once per pass).
Part of the on-disk format: changing it would hide entries written under the old count."""


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("|", "%7C")


def _unescape(text: str) -> str:
    return text.replace("%7C", "|").replace("%25", "%")


def data_key(key: str) -> str:
    """Row key of the user's data row ``key``."""
    return DATA + key


def step_tag(step: int) -> str:
    """Memo tag of forward step ``step``."""
    return f"s{step}"


def compensation_tag(step: int) -> str:
    """Memo tag of the compensation of forward step ``step``."""
    return f"c{step}"


def late_undo_tag(step: int) -> str:
    """Memo tag of the undo of effect step ``step`` whose call an execution saw answered after the
    request was undone at that step (the first undo may have found nothing to undo yet)."""
    return f"u{step}"


def settled_undo_tag(step: int) -> str:
    """Memo tag of the undo of effect step ``step`` run again once its call can no longer land: the
    request was undone at that step while an attempt may have been in flight (its holder gone)."""
    return f"d{step}"


def lease_tag(step: int) -> str:
    """Row tag of the lease of effect step ``step`` (beside its memo, collected with it)."""
    return f"l{step}"


def memo_key(workflow: str, request_id: str, tag: str) -> str:
    """Row key of a memo."""
    return memo_prefix(workflow, request_id) + tag


def memo_prefix(workflow: str, request_id: str) -> str:
    """What every memo key of one request starts with (an execution computes it once)."""
    return f"{MEMO}{_escape(workflow)}|{_escape(request_id)}|"


def run_key(workflow: str) -> str:
    """Row key of the run record (partition: the request id)."""
    return RUN + workflow


def outbox_partition(request_id: str) -> str:
    """The outbox partition of a request: a stable hash, so every writer picks the same one.

    >>> outbox_partition("order-1")
    'outbox.11'
    """
    digest = hashlib.sha256(request_id.encode("utf-8")).digest()
    return f"outbox.{digest[0] % OUTBOX_SHARDS}"


def outbox_partitions() -> list[str]:
    """Every outbox partition, in the order a relay reads them."""
    return [f"outbox.{n}" for n in range(OUTBOX_SHARDS)]


def limit_key(kind: str, name: str, part: str) -> str:
    """Row key of a limit's ``slots`` or ``bucket`` row, in :data:`LIMITS_PARTITION`.

    >>> limit_key("group", "payments", "slots")
    'lgroup|payments|slots'
    """
    return f"{LIMIT}{kind}|{_escape(name)}|{part}"


def schedule_key(name: str) -> str:
    """Row key of a schedule's state, in :data:`SCHEDULES_PARTITION` (a schedule's name never
    holds ``|`` or ``%``: :func:`idemflow.scheduling.definition.check_schedule_name`).

    >>> schedule_key("nightly-report")
    'snightly-report'
    """
    return SCHEDULE + _escape(name)


def outbox_key(workflow: str, request_id: str) -> str:
    """Row key of a request's outbox entry."""
    return f"{OUTBOX}{_escape(workflow)}|{_escape(request_id)}"


def wake_key(workflow: str, request_id: str, cause: str) -> str:
    """Row key of a wake-up of a request (outbox partition), one per ``cause``.

    >>> wake_key("parent", "p-1", "child c-1")
    'oparent|p-1|w9be31366ef437fa0'
    """
    tag = hashlib.sha256(cause.encode("utf-8")).hexdigest()[:16]
    return f"{outbox_key(workflow, request_id)}|w{tag}"


def inbox_prefix(workflow: str, request_id: str, topic: str) -> str:
    """What every message key of ``topic`` sent to a request starts with."""
    return f"{INBOX}{_escape(workflow)}|{_escape(request_id)}|{_escape(topic)}|"


def inbox_key(workflow: str, request_id: str, topic: str, sender: str) -> str:
    """Row key of the message ``sender`` (a sending step, escaped) sent to a request on ``topic``."""
    return inbox_prefix(workflow, request_id, topic) + _escape(sender)


def parse_inbox_key(row_key: str) -> tuple[str, str] | None:
    """``(workflow, request id)`` a message row was sent to, or None.

    >>> parse_inbox_key(inbox_key("pay", "p|1", "t", "s"))
    ('pay', 'p|1')
    """
    if not row_key.startswith(INBOX):
        return None
    parts = row_key[1:].split("|")
    if len(parts) != 4:
        return None
    return _unescape(parts[0]), _unescape(parts[1])


def event_key(workflow: str, request_id: str, key: str) -> str:
    """Row key of the event ``key`` a request set (partition: the request id).

    >>> event_key("pay", "p|1", "status")
    'epay|p%7C1|status'
    """
    return f"{EVENT}{_escape(workflow)}|{_escape(request_id)}|{_escape(key)}"


def event_prefix(workflow: str, request_id: str) -> str:
    """What the key of every event of a request starts with."""
    return f"{EVENT}{_escape(workflow)}|{_escape(request_id)}|"


def stream_prefix(workflow: str, request_id: str, key: str | None = None) -> str:
    """What the key of every row of a request's stream ``key`` starts with (of all its streams
    with no ``key``)."""
    start = f"{STREAM}{_escape(workflow)}|{_escape(request_id)}|"
    return start if key is None else f"{start}{_escape(key)}|"


def stream_key(workflow: str, request_id: str, key: str, offset: int) -> str:
    """Row key of the value at ``offset`` of a request's stream ``key``.

    >>> stream_key("pay", "p-1", "log", 3)
    'tpay|p-1|log|0000000003'
    """
    return f"{stream_prefix(workflow, request_id, key)}{offset:0{OFFSET_DIGITS}d}"


def stream_end_key(workflow: str, request_id: str, key: str) -> str:
    """Row key of the end of a request's stream ``key`` (written by ``close_stream``)."""
    return stream_prefix(workflow, request_id, key) + STREAM_END


def parse_published_key(row_key: str) -> tuple[str, str, str, str | None] | None:
    """``(workflow, request id, key, part)`` of an event's or a stream's row key, or None; ``part``
    is None for an event, an offset's digits or :data:`STREAM_END` for a stream.

    >>> parse_published_key(event_key("pay", "p|1", "a|b"))
    ('pay', 'p|1', 'a|b', None)
    >>> parse_published_key(stream_end_key("pay", "p-1", "log"))
    ('pay', 'p-1', 'log', 'end')
    """
    if not row_key.startswith((EVENT, STREAM)):
        return None
    parts = row_key[1:].split("|")
    if len(parts) != (3 if row_key[0] == EVENT else 4):
        return None
    part = parts[3] if row_key[0] == STREAM else None
    if part is not None and part != STREAM_END and not (len(part) == OFFSET_DIGITS and part.isdigit()):
        return None
    return _unescape(parts[0]), _unescape(parts[1]), _unescape(parts[2]), part


def check_published_key(key: object, what: str) -> str:
    """An event's or a stream's key: non-empty text of at most :data:`MAX_PUBLISHED_KEY_CHARS`
    characters, else :class:`InvalidNameError` naming ``what``.

    >>> check_published_key(7, "event key")
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidNameError: invalid event key 7: must be a str, not int
    """
    return _check_text(what, key, MAX_PUBLISHED_KEY_CHARS)


def user_key(row_key: str) -> str | None:
    """The user key of a data row key, or None for memo and bookkeeping rows."""
    return row_key[1:] if row_key.startswith(DATA) else None


def parse_memo_key(row_key: str) -> tuple[str, str, str] | None:
    """``(workflow, request id, tag)`` of a memo row key, or None."""
    if not row_key.startswith(MEMO):
        return None
    parts = row_key[1:].split("|")
    if len(parts) != 3:
        return None
    return _unescape(parts[0]), _unescape(parts[1]), parts[2]


def parse_outbox_key(row_key: str) -> tuple[str, str] | None:
    """``(workflow, request id)`` of an outbox entry's (or a wake-up's) row key, or None.

    >>> parse_outbox_key(outbox_key("transfer", "a|b"))
    ('transfer', 'a|b')
    >>> parse_outbox_key(wake_key("transfer", "a|b", "why"))
    ('transfer', 'a|b')
    """
    if not row_key.startswith(OUTBOX):
        return None
    parts = row_key[1:].split("|")
    if len(parts) not in (2, 3) or (len(parts) == 3 and not parts[2].startswith("w")):
        return None
    return _unescape(parts[0]), _unescape(parts[1])


def _check_text(what: str, value: object, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidNameError(what, value, f"must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidNameError(what, value, "must not be empty")
    if len(value) > max_chars:
        raise InvalidNameError(what, value[:40] + "…", f"longer than {max_chars} characters")
    if value.isascii():  # every ASCII text encodes: no bytes built for the usual name
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidNameError(what, value, "is not valid unicode (lone surrogate)") from exc
    return value


_VALID_TABLES: set[str] = set()
"""Table names already checked: a program uses a handful, every step names one."""


def check_table(name: object) -> str:
    """A logical table name valid on every backend (Azure is the strictest)."""
    if type(name) is str and name in _VALID_TABLES:
        return name
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise InvalidNameError("table", name, "must be 3-40 ASCII letters and digits, starting with a letter")
    if type(name) is str and len(_VALID_TABLES) < 1024:
        _VALID_TABLES.add(name)
    return name


def check_workflow_name(name: object) -> str:
    """A workflow name: letters, digits, ``_ . -``, starting with a letter or ``_``."""
    if not isinstance(name, str) or not _WORKFLOW_NAME.fullmatch(name):
        raise InvalidNameError(
            "workflow name", name, "must be 1-100 of A-Z a-z 0-9 _ . -, not starting with . or -"
        )
    return name


def check_request_id(request_id: object) -> str:
    """A request id: any non-empty unicode text up to 255 characters."""
    return _check_text("request id", request_id, MAX_ID_CHARS)


def check_partition(partition: object) -> str:
    """A partition: any non-empty unicode text up to 255 characters."""
    return _check_text("partition", partition, MAX_ID_CHARS)


def check_key(key: object) -> str:
    """A data key: any non-empty unicode text up to 512 characters."""
    return _check_text("key", key, MAX_KEY_CHARS)


def check_duration(value: object, what: str, *, zero: bool = False) -> float:
    """A finite number of seconds, ``> 0`` (``>= 0`` with ``zero``): an effect's lease and
    timeout, a workflow's timeout, a retry policy's intervals. Else :class:`InvalidInputError`
    naming ``what``.

    >>> check_duration(2, "effect timeout")
    2.0
    >>> check_duration(float("inf"), "effect timeout")
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: effect timeout must be a finite number of seconds > 0, not inf
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not (value >= 0 if zero else value > 0)
    ):
        raise InvalidInputError(
            f"{what} must be a finite number of seconds {'>= 0' if zero else '> 0'}, not {value!r}"
        )
    return float(value)
