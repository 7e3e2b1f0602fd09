"""The revision of the bookkeeping rows' format, with the history of what each revision added.

It is kept apart from :mod:`idemflow.records` (which re-exports :data:`FORMAT`) because the
history is long and read by people checking an old row, not by code: every reader and writer of
a row goes through the classes of :mod:`idemflow.records` and :mod:`idemflow.core`.
"""

from __future__ import annotations

__all__ = ["FORMAT"]

FORMAT = 7
"""The revision of this format: raised whenever a row gains a field or a kind of row appears,
together with golden rows of the new revision under ``tests/golden`` (a test holds every revision
to its rows). Readers take every earlier revision: a field a row lacks has its old meaning.

1. (0.1.0) memos ``id`` with ``v`` or ``abort``; run records ``fp``, ``status``, ``at`` and
   ``result`` or ``reason``.
2. (0.2.0) run records gain ``st`` (started), ``in`` (a submission's input), ``wv`` (the workflow
   version, absent for 1), ``fail`` and ``wait``.
3. (0.3.0) run records gain ``par`` (the parent to wake); wake-up rows and inbox messages appear.
4. (0.4.0) run records gain ``rt`` (a step a worker tries again: :class:`Attempts`) and ``dl``
   (the request's deadline), and the status ``cancelled``; memos gain ``t`` (when the step
   committed, epoch milliseconds); memos of an outside call's undo appear (``compensate
   effect ...``, beside the run record).
5. (1.0.0) run records gain ``ct`` (the continuation a waiting request's pointer must carry:
   :class:`Continuation`) and ``i`` (the run's incarnation: :func:`new_incarnation`); memos gain
   ``i``, their run's incarnation, so a memo that outlived its run record is told apart from the
   memos of a later request reusing the id.
   Run records also gain ``rn`` (the request's retention in seconds, ``submit``'s
   ``RetryPolicy.retention``), inside ``in`` beside ``args`` and ``kwargs``: it is stored with
   the submission, as long as a worker or an operator may still write rows for the request, so
   every row they write expires by it (:attr:`RunRecord.retention`).
   Beside it, a delayed submission stores ``nb`` (epoch seconds before which no worker may start
   it: :attr:`RunRecord.not_before`) and a prioritised one ``ln`` (its queue lane:
   :attr:`RunRecord.lane`, one of :data:`STORED_LANES`); a record without them is neither delayed
   nor prioritised, and a lane this release does not know is the normal lane.
   Run records also gain ``tg``, the request's tags (``submit(tags=)``, ``run(tags=)``: a JSON
   object of str to str, :mod:`idemflow.core.tags`), beside the status rather than in ``in``, so
   the finished record keeps them; a request without tags writes no ``tg``, byte for byte the
   record it wrote before tags existed.
   A cancelled record also carries ``reason`` (the operator's), a field run records have had since
   revision 1, which every release reads whatever the status: a cancelled record written without
   it has its reason in its ``wait`` note only (:attr:`RunRecord.cancel_reason`).
6. (1.1.0) events and stream values appear, beside the run record: :class:`Event` rows
   (``set_event``: ``v``, ``n`` the step that set it, ``at``), :class:`StreamItem` rows
   (``write_stream``: ``v``, ``n``; the offset in the key) and :class:`StreamEnd` rows
   (``close_stream``: ``len``, ``n``, ``at``); see :mod:`idemflow.keys` for their keys.
   Run records also gain ``pl``, ``sn`` and ``plm`` (:class:`Places`: where the request's atomic
   steps keep their memos), and a submission's checkpoint writes them in a places row beside the
   record (``m<workflow>|<request>|j``); a request with no atomic step writes none of them.
7. (1.2.0) schedules' state rows appear: one per schedule at ``s<schedule>`` in the ``schedules``
   partition of ``idemflowruns`` (:class:`~idemflow.core.schedule_state.ScheduleState`: ``a``, the
   instant after which its ticks are due; ``l``, the last tick a scheduler fired; ``p`` and
   ``pa``, paused and when), written with no expiry. A tick's request is an ordinary request
   (its id ``<schedule>@<tick in UTC>``, its input the schedule's with the tick as ``tick``):
   no other row changed.
   Also in 1.2.0, a request that continued as new (``continue_as_new``) keeps its one run record:
   the switch rewrites it with the next incarnation, whose ``i`` ends in ``g`` and its number
   (``g2`` after the first switch: :func:`~idemflow.core.memos.renewed_incarnation`; no suffix is
   the first), and the memos that incarnation writes carry the same ``i``, so a memo tells which
   incarnation wrote it without a read. ``fp`` stays the first incarnation's input's; ``in`` holds
   the current incarnation's input (``args``, ``kwargs``, with the first's ``rn`` and ``ln``), a
   request ``run`` started too; ``st`` is when the current incarnation began, and ``pl``/``sn``,
   ``wait``, ``rt`` and ``ct`` start again empty. Memos of an earlier incarnation stay at their step
   numbers until the next one replaces them (or they expire). No field was added: a release before
   1.2.0 reads the record, but cannot run a later incarnation (the stored input does not match
   ``fp``), so every worker must run 1.2.0 before a request first continues as new.
"""
