"""What a psycopg failure means to idemflow: a table from PostgreSQL's SQLSTATE classes (and, for a
connection that failed before the server answered with one, from libpq's words) to
:class:`~idemflow.errors.ErrorCode`.

A lost connection, a server shutting down or restarting, a deadlock or a serialization failure
is transient: the engine retries the commit, and a commit whose ``COMMIT`` never reached the
server was rolled back by it (nothing half-written). A refused login is ``CREDENTIALS_REFUSED``,
a database or schema that does not exist ``NOT_FOUND``: retrying will not help.

Needs the ``postgres`` extra (psycopg).

>>> import psycopg
>>> lost = psycopg.OperationalError("server closed the connection unexpectedly")
>>> error = postgres_error("commit failed", lost, "COMMIT")
>>> type(error).__name__, error.code, error.backend
('TransientError', <ErrorCode.TRANSIENT: 'transient'>, 'postgres')
"""

from __future__ import annotations

import psycopg

from idemflow.errors import BackendError, ErrorCode, backend_error

BACKEND = "postgres"

CLASSES: dict[str, ErrorCode] = {
    "08": ErrorCode.TRANSIENT,  # connection exception
    "28": ErrorCode.CREDENTIALS_REFUSED,  # invalid authorization specification (a refused login)
    "3D": ErrorCode.NOT_FOUND,  # invalid catalog name: no such database
    "3F": ErrorCode.NOT_FOUND,  # invalid schema name
    "40": ErrorCode.TRANSIENT,  # transaction rollback: serialization failure, deadlock
    "53": ErrorCode.TRANSIENT,  # insufficient resources (too many connections, disk full)
    "55": ErrorCode.TRANSIENT,  # object not in prerequisite state (lock not available)
    "57": ErrorCode.TRANSIENT,  # operator intervention: shutdown, restart, query canceled
    "58": ErrorCode.TRANSIENT,  # system error (I/O)
    "42": ErrorCode.MISCONFIGURED,  # syntax error or access rule violation (no privilege)
}
"""SQLSTATE classes (the first two characters) idemflow acts on."""
STATES: dict[str, ErrorCode] = {"42501": ErrorCode.CREDENTIALS_REFUSED}
"""Single SQLSTATEs that differ from their class (insufficient privilege)."""
_WORDS = (
    ("password authentication failed", ErrorCode.CREDENTIALS_REFUSED, "28P01"),
    ("no pg_hba.conf entry", ErrorCode.CREDENTIALS_REFUSED, "28000"),
    ('role "', ErrorCode.CREDENTIALS_REFUSED, "28000"),
    ('database "', ErrorCode.NOT_FOUND, "3D000"),
)
"""libpq's words for a refusal at connection time, where psycopg gives no SQLSTATE."""


def classify(exc: BaseException) -> tuple[ErrorCode, str]:
    """``(code, service_code)`` of a psycopg failure: by SQLSTATE, else by libpq's words, else a
    connection problem (``OperationalError``, a pool timeout) is transient and the rest unclassified."""
    state = getattr(exc, "sqlstate", None)
    if state:
        return STATES.get(state) or CLASSES.get(state[:2], ErrorCode.BACKEND_FAILED), state
    said = str(exc)
    for words, code, named in _WORDS:
        if words in said and ("does not exist" in said or code is ErrorCode.CREDENTIALS_REFUSED):
            return code, named
    if isinstance(exc, psycopg.OperationalError) or type(exc).__name__ == "PoolTimeout":
        return ErrorCode.TRANSIENT, type(exc).__name__
    return ErrorCode.BACKEND_FAILED, type(exc).__name__


def postgres_error(message: str, exc: BaseException, operation: str) -> BackendError:
    """The idemflow error for ``exc`` met by ``operation``, worded ``"{message}: {exc}"``."""
    code, said = classify(exc)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return backend_error(f"{message}: {first}", code, backend=BACKEND, operation=operation, service_code=said)


__all__ = ["BACKEND", "CLASSES", "STATES", "classify", "postgres_error"]
