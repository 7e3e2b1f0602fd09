"""``check_workflow``: run your workflow under every crash point and compare with one clean run.

Why: idemflow makes each *step* exactly-once, but a workflow can still break
the guarantee around its steps — by passing data between steps through Python
state instead of step results, by reading the wall clock, ``random`` or a
``uuid`` outside ``now()``/``random()``/``uuid4()``, by branching on anything
that is not an input or a step result. Such bugs hide in the happy path and
show up only when a process dies at the wrong moment. This checker makes the
wrong moments happen, all of them, deterministically.

For each input it runs the workflow once on a fresh store (the *reference*:
result and every data row), counts that run's commits, and then, each on a
fresh store from ``store_factory()``:

- reruns it failure-free (a workflow that is not deterministic differs here);
- for every commit and each fault (crash before the commit, crash after it,
  its answer lost, a concurrent writer's conflict) injects that fault and
  retries until the request finishes, as a supervisor would — this covers
  the crash points inside compensation too;
- crashes after *every* commit in turn (one commit of progress per execution);
- loses the completion record and sends a duplicate;
- races ``duplicates`` concurrent executions, once cleanly and once with each
  crashing at a different commit;
- for a ``@workflow`` that reaches ``checkpoint()``: ``submit`` + a
  :class:`~idemflow.worker.Worker` on a :class:`MemoryQueue`, with a
  crash at every commit of the whole asynchronous path and a redelivered message.

Each scenario must end with the reference's outcome, data rows and memo keys.
The first that does not is reported as a readable trace.

>>> from idemflow import atomic, workflow
>>> @workflow("deposit")
... def deposit(req):
...     yield atomic("accounts", req["to"], lambda tx: tx.increment("balance", req["amount"]))
...     return "ok"
>>> report = check_workflow(deposit, [{"to": "bob", "amount": 5}])
>>> report.ok, report.scenarios > 5
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from idemflow.core.policy import RetryPolicy
from idemflow.engine.monad import Idem
from idemflow.stores.base import Store
from idemflow.stores.memory import MemoryStore
from idemflow.testing._plans import CheckOptions, fast_policy, snapshot
from idemflow.testing._scenarios import Checker
from idemflow.testing.faults import Fault
from idemflow.testing.report import CheckReport

DEFAULT_FAULTS = (Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER, Fault.CONFLICT)
"""Faults injected at every commit by default."""

FIXED_TIME = 1_767_225_600.0
"""What ``now()`` returns in checked runs (2026-01-01), so runs on different stores compare equal."""


def check_workflow(
    wf: Callable[[Any], Idem[Any]],
    inputs: Iterable[object],
    store_factory: Callable[[], Store] = MemoryStore,
    *,
    setup: Callable[[Store], object] | None = None,
    faults: Sequence[Fault] = DEFAULT_FAULTS,
    duplicates: int = 4,
    request_id: str = "idemflow-check",
    signing_key: bytes = b"idemflow-check",
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = lambda: FIXED_TIME,
    max_attempts: int = 60,
) -> CheckReport:
    """Check that ``wf(input)`` has the effect of one failure-free run under every
    crash point, duplicate and conflict (see the module docstring); stop at the first divergence.

    ``store_factory`` makes a fresh, empty store per scenario (``MemoryStore`` by
    default; pass ``lambda: SqliteStore(...)`` or a cloud store to test that
    backend); ``setup(store)`` prepares each one (open accounts, ...) and is not
    under test. Every execution runs under the request id ``f"{request_id}-{n}"``
    for the ``n``-th input and with ``now()`` returning :data:`FIXED_TIME`.

    >>> from idemflow import atomic, workflow
    >>> seen = []
    >>> @workflow("leaky")
    ... def leaky(who):
    ...     yield atomic("accounts", who, lambda tx: seen.append(1))  # state outside the store ...
    ...     yield atomic("audit", who, lambda tx: tx.put("steps", len(seen)))  # ... leaks into a row
    >>> report = check_workflow(leaky, ["ann"])
    >>> report.ok
    False
    >>> print(report.first_divergence.trace.splitlines()[0])
    workflow 'leaky' diverged from its failure-free run
    """
    if duplicates < 2:
        raise ValueError("duplicates must be at least 2")
    options = CheckOptions(
        wf=wf,
        store_factory=store_factory,
        setup=setup,
        faults=tuple(faults),
        duplicates=duplicates,
        request_id=request_id,
        signing_key=signing_key,
        policy=policy or fast_policy(),
        clock=clock,
        max_attempts=max_attempts,
    )
    scenarios, count, name = 0, 0, getattr(wf, "name", getattr(wf, "__name__", "idem"))
    skipped: list[str] = []
    for index, given in enumerate(inputs):
        checker = Checker(options, index, given)
        checker.check()
        scenarios += checker.scenarios
        count += 1
        name = checker.name
        if checker.skipped and checker.skipped not in skipped:
            skipped.append(checker.skipped)
        if checker.divergence is not None:
            return CheckReport(name, False, scenarios, count, checker.divergence, tuple(skipped))
    return CheckReport(name, True, scenarios, count, None, tuple(skipped))


__all__ = ["DEFAULT_FAULTS", "FIXED_TIME", "check_workflow", "fast_policy", "snapshot"]
