"""The readers of the reading workload (:mod:`samples.chaos.reading`): outside the workers, in the
driver, a reader per job follows the job's ``stage`` event (and its kid's) and reads its stream.

- the events: the first read waits for the job to set its event (``get_event(..., timeout=)``;
  half the readers with ``aget_event``), later ones look again every 50 ms, each value seen
  recorded (:meth:`~samples.chaos.reading_checks.Seen.saw_event`: one going back is a problem)
  and each stage reached told to the workload (which nudges or cancels the job then);
- the stream: ``read_stream`` from offset 0 (half with ``aread_stream``), each value recorded as
  read; a read that times out goes on from the offset the timeout names, until the stream is over
  or the job is (a cancelled job's stream may stay open).

>>> from idemflow.stores import MemoryStore
>>> req = flows.job_request("j-1", values=2, mark=1, kid=False, nudged=False, quick=True)
>>> readers = Readers(MemoryStore(), [req], checks.Seen(), lambda req, stage: None)
>>> readers.read
[0]
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from idemflow.client import RunStatus, aget_event, aread_stream, get_event, read_stream, status
from idemflow.errors import StreamTimeoutError
from idemflow.stores import Store
from samples.chaos import reading_checks as checks
from samples.chaos import reading_flows as flows

READ_WAIT = 4.0
"""Seconds a stream's reader waits for a next value before it reads on from the offset named."""


@dataclass
class Readers:
    """A reader per job, following its events and reading its stream (see the module docstring)."""

    store: Store
    jobs: list[flows.JobRequest]
    seen: checks.Seen
    at_stage: Callable[[flows.JobRequest, int], None]
    """Told each stage a reader sees a job reach (in order, none skipped): the nudges and cancels."""
    read: list[int] = field(default_factory=lambda: [0])
    """Stream values read so far (the killer's progress)."""
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        for n, req in enumerate(self.jobs):
            for target in (self._events, self._stream):
                thread = threading.Thread(target=target, args=(req, n % 2 == 1), daemon=True)
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _over(self, rid: str) -> bool:
        found = status(self.store, flows.JOB, rid).status
        return found.final or found is RunStatus.CANCELLED

    def _events(self, req: flows.JobRequest, awaited: bool) -> None:
        rid, kid = req["id"], flows.kid_id(req["id"])
        value = None
        while value is None and not self._stop.is_set():  # waits for the job to set it
            if awaited:
                value = asyncio.run(aget_event(self.store, flows.JOB, rid, flows.STAGE, timeout=2.0))
            else:
                value = get_event(self.store, flows.JOB, rid, flows.STAGE, timeout=2.0)
        acted = -1
        while value is not None:
            self.seen.saw_event(rid, value)
            stage = checks.stage_of(value)
            for reached in range(acted + 1, (stage or 0) + 1):
                self.at_stage(req, reached)
            acted = max(acted, stage or 0)
            if req["kid"]:
                kid_value = get_event(self.store, flows.KID, kid, flows.STAGE, timeout=0)
                if kid_value is not None:
                    self.seen.saw_event(kid, kid_value)
            if stage == len(flows.STAGE_NAMES) - 1 or self._stop.is_set():
                break
            if self._over(rid):  # cancelled: one last look at what it had set
                self.seen.saw_event(rid, get_event(self.store, flows.JOB, rid, flows.STAGE, timeout=0))
                break
            time.sleep(0.05)
            value = get_event(self.store, flows.JOB, rid, flows.STAGE, timeout=0)

    def _stream(self, req: flows.JobRequest, awaited: bool) -> None:
        """Read the job's stream from offset 0 to its end, on from the offset a timeout names."""
        if awaited:
            asyncio.run(self._astream(req))
            return
        rid, offset = req["id"], 0
        at: int | None = 0
        while at is not None and not self._stop.is_set():
            offset = at
            try:
                for value in read_stream(
                    self.store, flows.JOB, rid, flows.TOKENS, offset=offset, timeout=READ_WAIT
                ):
                    offset = self._took(rid, value, offset)
                self.seen.ended.add(rid)
                return
            except StreamTimeoutError as waited:
                at = self._resume(rid, offset, waited)

    async def _astream(self, req: flows.JobRequest) -> None:
        """:meth:`_stream` with ``aread_stream``."""
        rid, offset = req["id"], 0
        at: int | None = 0
        while at is not None and not self._stop.is_set():
            offset = at
            try:
                async for value in aread_stream(
                    self.store, flows.JOB, rid, flows.TOKENS, offset=offset, timeout=READ_WAIT
                ):
                    offset = self._took(rid, value, offset)
                self.seen.ended.add(rid)
                return
            except StreamTimeoutError as waited:
                at = self._resume(rid, offset, waited)

    def _took(self, rid: str, value: object, offset: int) -> int:
        self.seen.saw_token(rid, value)
        self.read[0] += 1
        return offset + 1

    def _resume(self, rid: str, offset: int, waited: StreamTimeoutError) -> int | None:
        """Where to read on after a timeout (None: the job is over, cancelled with its stream open)."""
        if waited.offset != offset:
            self.seen.note(f"{rid}: the reader is at offset {offset}, its timeout says {waited.offset}")
        self.seen.resumed += 1
        return None if self._over(rid) else waited.offset
