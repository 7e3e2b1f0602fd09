"""Fault injection and crash/duplicate checkers, for proving that workflows survive failures.

- :func:`check_workflow` runs your workflow under every crash point, lost
  answer, conflict, duplicate and (for checkpointed workflows) worker crash,
  and compares each outcome with one failure-free run; the first divergence
  comes back as a readable trace. ``pytest_plugins = ["idemflow.testing.plugin"]``
  gives the same as the fixture ``idemflow_check``.
- :class:`FaultyStore` wraps any real store and injects, at chosen commits or
  reads, the failures a distributed system produces: a process crash before
  the commit is sent, a crash after it was applied but before the caller saw
  the answer, a lost answer (the commit applied, the caller gets a transient
  error), transient errors and conflicts with a concurrent writer. The wrapped
  store is real, so what a test then asserts on is real state.
- :class:`StoreWrapper` passes every store call through: subclass it to watch
  or change some calls of a real store in your own tests.
- The chaos suite over the sample applications (``make chaos``) lives in
  ``samples/chaos/``: it is an application of this kit, not part of it.

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> from idemflow.testing import FaultyStore, Fault, SimulatedCrash
>>> store = FaultyStore(MemoryStore(), lambda point: Fault.CRASH_AFTER if point.index == 0 else None)
>>> step = atomic("accounts", "a", lambda tx: tx.increment("n"))
>>> try:
...     run(step, request_id="r", store=store)
... except SimulatedCrash:
...     print("crashed after commit")
crashed after commit
>>> run(step, request_id="r", store=store)  # the retry finds the memo
"""

from idemflow.testing._plans import fast_policy, snapshot
from idemflow.testing.check import DEFAULT_FAULTS, FIXED_TIME, check_workflow
from idemflow.testing.faults import Fault, FaultPoint, FaultyStore, SimulatedCrash, StoreWrapper, data_rows
from idemflow.testing.report import CheckReport, Divergence, Outcome, Snapshot

__all__ = [
    "DEFAULT_FAULTS",
    "FIXED_TIME",
    "CheckReport",
    "Divergence",
    "Fault",
    "FaultPoint",
    "FaultyStore",
    "Outcome",
    "SimulatedCrash",
    "Snapshot",
    "StoreWrapper",
    "check_workflow",
    "data_rows",
    "fast_policy",
    "snapshot",
]
