"""How executions retry: data conflicts rerun a body, transient store errors resend a commit.

Both are tenacity ``Retrying`` objects, so a caller can pass their own stop,
wait and sleep (tests inject a sleep that never waits). The defaults are
shared safely: a ``Retrying`` is only ever used through ``.copy()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from idemflow.errors import TransientStoreError


class DataConflict(Exception):
    """A body's reads went stale before its commit: run it again."""


def _default_conflict_retrying() -> Retrying:  # copied before every use: never iterated itself
    return Retrying(
        stop=stop_after_attempt(16),
        wait=wait_random_exponential(multiplier=0.002, max=0.5),
        retry=retry_if_exception_type(DataConflict),
        reraise=True,
    )


def _default_transient_retrying() -> Retrying:
    return Retrying(
        stop=stop_after_attempt(8),
        wait=wait_random_exponential(multiplier=0.02, max=2.0),
        retry=retry_if_exception_type(TransientStoreError),
        reraise=True,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an execution retries: data conflicts (the body reruns) and
    transient store errors (the same commit is resent). Pass your own
    tenacity ``Retrying`` objects to change bounds, waits or the sleep.

    >>> RetryPolicy().retention / 86400
    7.0
    """

    conflicts: Retrying = field(default_factory=_default_conflict_retrying)
    transient: Retrying = field(default_factory=_default_transient_retrying)
    retention: float = 7 * 24 * 3600.0
    """Seconds memo and run rows are kept where the backend expires rows (TTL)."""


DEFAULT_POLICY = RetryPolicy()
"""Shared safely: its ``Retrying`` objects are only ever used through ``.copy()``."""
