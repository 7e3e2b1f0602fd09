"""What a step's attempts are made of, for the stepper that makes them.

A step is attempted once, then again under the policy after a data conflict; each attempt
answers with the step's value, or with :data:`RETRY` (a conflict: run the body again) or
:class:`Unreachable` (the store could not be reached). :class:`StepArgs` is a step as its
retries see it; :func:`constant` a body that only decides its value; :data:`NOT_CALLED` what an
effect's attempt saw before its call answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from idemflow.core.requests import CallOut, Steps
from idemflow.engine.effect_call import RunRecordSeen
from idemflow.engine.tx import Tx
from idemflow.errors import TransientError
from idemflow.stores.base import Op, Row, RowRef

Extra = Callable[[], Steps[list[Op]]]
"""Operations beyond the step's partition that commit with it (a child's claim, a message),
recomputed on every attempt."""

NOT_CALLED: Any = object()
"""No call out was answered in this execution's attempt at the effect."""


def stop_if_present(row: Row | None) -> None:
    """A first step's peek at its run record: one there stops the body (:class:`RunRecordSeen`)."""
    if row is not None:
        raise RunRecordSeen(row)


RETRY: Any = object()
"""An attempt that met a data conflict (or could not send its commit): run the body again."""


class Unreachable:
    """An attempt whose reads could not reach the store: run it again, and if the step's time
    runs out, report the store's error rather than a conflict there was none of."""

    __slots__ = ("error",)

    def __init__(self, error: TransientError) -> None:
        self.error = error


class StepArgs(NamedTuple):
    """One step as its retries see it: where its memo lives, what it is called, what it runs
    (the first attempt takes the same as arguments: no tuple on the hot path)."""

    memo_ref: RowRef
    identity: str
    body: Callable[[Tx], Any]
    abortable: bool
    call_out: CallOut | None
    extra: Extra | None
    defer: bool
    """This attempt may leave its commit pending (a step's first attempt, where it may fold)."""


def constant(value: Any) -> Callable[[Tx], Any]:
    """A step body that only decides ``value`` (the step's memo is all it writes)."""
    return lambda tx: value


__all__ = ["NOT_CALLED", "RETRY", "Extra", "StepArgs", "Unreachable", "constant", "stop_if_present"]
