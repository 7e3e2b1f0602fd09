"""Schedules: a workflow started at every tick of a cron expression, one request per tick.

``definition`` (what a schedule is: :class:`~idemflow.scheduling.definition.Schedule`, its ticks'
request ids), ``cron`` (its ticks, by cronsim), ``firing`` (a scheduler's pass), ``scheduler``
(passes beside a worker) and ``operations`` (an operator's list, pause, resume and trigger).
``idemflow`` exports ``Schedule``, ``idemflow.worker`` the passes, ``idemflow.admin`` the
operator's commands.
"""
