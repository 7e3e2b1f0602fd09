"""What the soak samples every interval: expired rows still in the file by kind, the oldest one's
lateness, the file's size, the process's memory, and the last interval's latency.

The rows are counted by SQL on a connection of the sampler's own (one full scan: not what the
store's sweep does, which never reads the whole file at once). Kinds follow
:mod:`idemflow.keys`: a row key starting with ``m`` is a memo, ``r`` in the run table a run
record, ``o`` or ``q`` an outbox entry, wake-up or message; anything else with an ``expires_at``
is "other".
"""

from __future__ import annotations

import os
import sqlite3
import statistics
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("memos", "run records", "outbox/inbox", "other")

_EXPIRED = (
    "SELECT tbl, substr(rk, 1, 1), count(*), min(expires) FROM idemflow_rows "
    "WHERE expires < ? GROUP BY tbl, substr(rk, 1, 1)"
)


@dataclass(frozen=True)
class Sample:
    """One interval's numbers (JSON-ready)."""

    t: float
    """Seconds since the load started."""
    expired: dict[str, int]
    oldest: dict[str, float]
    """Seconds past expiry of the oldest expired row still present, by kind (0: none)."""
    rows: int
    file_mb: float
    rss_mb: float
    run_p50_ms: float
    submit_p50_ms: float
    requests: int
    cpu_ms_per_request: float = 0.0
    """CPU of the whole process in the interval per request finished in it (load, worker, sweeps)."""
    store_backlog: dict[str, Any] | None = None
    """What the store itself says of its expired rows (the library's metric, where it has one)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(table: str, first: str, runs_table: str) -> str:
    if first == "m":
        return "memos"
    if table == runs_table and first == "r":
        return "run records"
    if first in ("o", "q"):
        return "outbox/inbox"
    return "other"


def expired_rows(path: str, now: float, runs_table: str) -> tuple[dict[str, int], dict[str, float], int]:
    """Expired rows present by kind, the oldest's lateness by kind, and all rows, read from ``path``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        counts = dict.fromkeys(KINDS, 0)
        oldest = dict.fromkeys(KINDS, 0.0)
        for table, first, count, earliest in conn.execute(_EXPIRED, (now,)).fetchall():
            kind = kind_of(str(table), str(first), runs_table)
            counts[kind] += int(count)
            oldest[kind] = max(oldest[kind], now - float(earliest))
        (rows,) = conn.execute("SELECT count(*) FROM idemflow_rows").fetchone()
    finally:
        conn.close()
    return counts, oldest, int(rows)


def file_mb(path: str) -> float:
    """The database file and its write-ahead log, in MB."""
    return sum(os.path.getsize(name) for name in (path, path + "-wal") if os.path.exists(name)) / 1e6


def rss_mb() -> float:
    """This process's resident memory, in MB (Linux's /proc; else the peak from getrusage)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1e3
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def p50_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3 if seconds else float("nan")
