"""Fault injection for proving that workflows survive crashes and duplicates.

:class:`FaultyStore` wraps any real store and injects, at chosen commits or
reads, the failures a distributed system produces: a process crash before
the commit is sent, a crash after it was applied but before the caller saw
the answer, a lost answer (the commit applied, the caller gets a transient
error) and transient errors. The wrapped store is real, so what a test then
asserts on is real state.

>>> from idemflow import MemoryStore, atomic, run
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

from idemflow.testing.faults import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows

__all__ = ["Fault", "FaultPoint", "FaultyStore", "SimulatedCrash", "data_rows"]
