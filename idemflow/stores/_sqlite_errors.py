"""What a sqlite3 failure means to idemflow, for the SQLite store and the SQLite queue alike.

One table from SQLite's result codes (``sqlite3.Error.sqlite_errorname``,
``SQLITE_BUSY``, ``SQLITE_CANTOPEN``, …) to :class:`~idemflow.errors.ErrorCode`:
contention and I/O hiccups are transient (the engine or the worker retries),
a file that cannot be opened, written or read as a database is the setup's
(:class:`~idemflow.errors.ConfigurationError`: retrying will not help). The
callers keep their own words; this module picks the class, the code and the
``service_code`` (the extended result name, e.g. ``SQLITE_BUSY_SNAPSHOT``).

>>> import sqlite3
>>> error = sqlite_error("read failed", sqlite3.OperationalError("database is locked"), "SELECT")
>>> type(error).__name__, error.code, error.backend
('TransientError', <ErrorCode.TRANSIENT: 'transient'>, 'sqlite')
"""

from __future__ import annotations

import sqlite3

from idemflow.errors import BackendError, ErrorCode, backend_error

BACKEND = "sqlite"

CODES: dict[str, ErrorCode] = {
    "SQLITE_BUSY": ErrorCode.TRANSIENT,
    "SQLITE_LOCKED": ErrorCode.TRANSIENT,
    "SQLITE_IOERR": ErrorCode.TRANSIENT,
    "SQLITE_FULL": ErrorCode.TRANSIENT,
    "SQLITE_PROTOCOL": ErrorCode.TRANSIENT,
    "SQLITE_INTERRUPT": ErrorCode.TRANSIENT,
    "SQLITE_CANTOPEN": ErrorCode.MISCONFIGURED,
    "SQLITE_PERM": ErrorCode.MISCONFIGURED,
    "SQLITE_READONLY": ErrorCode.MISCONFIGURED,
    "SQLITE_NOTADB": ErrorCode.MISCONFIGURED,
    "SQLITE_AUTH": ErrorCode.MISCONFIGURED,
    "SQLITE_CORRUPT": ErrorCode.BACKEND_FAILED,
}
"""SQLite's primary result codes idemflow acts on; an extended code (``SQLITE_IOERR_FSYNC``)
counts as its primary one."""


def classify(exc: sqlite3.Error, *, opening: bool = False) -> tuple[ErrorCode, str]:
    """``(code, service_code)`` of a sqlite3 failure. Unlisted ones: a failure to open the file is
    the setup's, another ``OperationalError`` transient, the rest unclassified."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    found = CODES.get("_".join(name.split("_")[:2]))
    if found is not None:
        return found, name
    said = name or type(exc).__name__
    if opening:
        return ErrorCode.MISCONFIGURED, said
    if isinstance(exc, sqlite3.OperationalError):
        return ErrorCode.TRANSIENT, said
    return ErrorCode.BACKEND_FAILED, said


def sqlite_error(message: str, exc: sqlite3.Error, operation: str, *, opening: bool = False) -> BackendError:
    """The idemflow error for ``exc`` met by ``operation`` (a statement, ``connect`` or a queue
    operation), worded by the caller: ``"{message}: {exc}"``."""
    meant, said = classify(exc, opening=opening)
    return backend_error(f"{message}: {exc}", meant, backend=BACKEND, operation=operation, service_code=said)


__all__ = ["BACKEND", "CODES", "classify", "sqlite_error"]
