"""Faulty stores for the chaos suite's threads and child processes.

>>> plan = random_plan(random.Random(1), 1.0, [Fault.LOST_ANSWER])
>>> plan(FaultPoint("commit", 0))
<Fault.LOST_ANSWER: 'lost-answer'>
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from idemflow import ConflictError, TransientError
from idemflow.stores import Store
from idemflow.stores.base import CommitOutcome, Op
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash

DIED = 86
"""Exit status of a worker process that ended itself right after a commit."""
RETRIED = (SimulatedCrash, TransientError, ConflictError)
"""What a chaos client retries (a simulated crash: the client's process 'died' and is run again)."""
IN_PROCESS_FAULTS = (Fault.LOST_ANSWER, Fault.TRANSIENT, Fault.CONFLICT)
"""What the servers' and workers' stores inject (a crash is the real thing there: SIGKILL, exit)."""
CLIENT_FAULTS = (Fault.CRASH_BEFORE, Fault.CRASH_AFTER, *IN_PROCESS_FAULTS)
"""What the stores of clients running in threads inject: crashes too."""


def random_plan(
    rng: random.Random, rate: float, faults: Sequence[Fault]
) -> Callable[[FaultPoint], Fault | None]:
    """Each commit gets one of ``faults`` with probability ``rate``."""
    lock = threading.Lock()

    def plan(point: FaultPoint) -> Fault | None:
        with lock:
            return rng.choice(faults) if rng.random() < rate else None

    return plan


class DyingStore(FaultyStore):
    """A faulty store that logs each injected fault (one byte, so the count survives a SIGKILL)
    and, with probability ``die`` per commit, ends the whole process right after the commit applied.

    >>> import tempfile
    >>> from idemflow import atomic, run
    >>> from idemflow.stores import MemoryStore
    >>> store = DyingStore(MemoryStore(), lambda p: None, 0.0, Path(tempfile.mkdtemp()) / "faults.log")
    >>> run(atomic("tablea", "p", lambda tx: 1), request_id="r", store=store)
    1
    """

    def __init__(
        self, inner: Store, plan: Callable[[FaultPoint], Fault | None], die: float, log: Path
    ) -> None:
        super().__init__(inner, plan)
        self.die = die
        self._log = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._rng = random.Random()

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        before = len(self.injected)
        try:
            return super().commit(ops)
        finally:
            if len(self.injected) > before:
                os.write(self._log, b"f")
            if self.die and self._rng.random() < self.die:
                os._exit(DIED)
