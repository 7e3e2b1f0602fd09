"""What an operator runs against a store and a queue: list and show requests, retry, cancel or
abort one, fork one from a step, check a deploy against the open requests, list and redrive dead
letters, relay the outbox, collect finished requests' rows, and list, pause, resume and trigger
schedules (:func:`schedules`, :func:`pause_schedule`, ...).

Each blocking function has its asyncio twin, named ``a`` + its name, taking the same steps on
the event loop (asynchronous stores and queues, or blocking ones on threads of their own).
``retry`` also resumes a ``running`` request nothing is queued for (``idemflow resume``).
Dead letters: :func:`dead_letters` and :func:`redrive` (``idemflow dead-letters list|redrive``).
The operator's abort is :func:`abort_request`: it ends a request from outside, where
:func:`idemflow.abort` is the step a workflow yields. :func:`fork` starts a new request keeping
an old one's steps before a given step (``idemflow runs fork``); :func:`check_deploy` replays the
open requests on new code, reading only, and lists those it would refuse (``idemflow check-deploy``).

>>> from idemflow import atomic, run
>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> run(atomic("items", "p", lambda tx: "ok"), request_id="r-1", store=store)
'ok'
>>> [(found.request_id, found.status.value) for found in runs(store).runs]
[('r-1', 'completed')]
"""

from __future__ import annotations

from idemflow.async_worklist._cancellation import acancel, cancel
from idemflow.async_worklist._dead_letters import adead_letters, aredrive, dead_letters, redrive
from idemflow.async_worklist._resumption import aretry, retry
from idemflow.async_worklist.outbox import arelay, relay
from idemflow.errors import ConsoleExposedError, ConsoleRefusedError
from idemflow.operator.collection import (
    ExpiredStats,
    GcReport,
    acollect,
    aexpired_stats,
    collect,
    expired_stats,
)
from idemflow.operator.commands import (
    RunsPage,
    RunSummary,
    aabort_request,
    abort_request,
    aruns,
    runs,
)
from idemflow.operator.deploy_check import DeployCheck, DeployProblem, acheck_deploy, check_deploy
from idemflow.operator.forking import afork, fork
from idemflow.operator.published import EventView, StreamView
from idemflow.operator.stored_steps import StepView
from idemflow.operator.timeline import RequestView, ashow, show
from idemflow.records import RunRecord
from idemflow.scheduling.operations import (
    ScheduleView,
    apause_schedule,
    aresume_schedule,
    aschedules,
    atrigger_schedule,
    pause_schedule,
    resume_schedule,
    schedules,
    trigger_schedule,
)

__all__ = [
    "ConsoleExposedError",
    "ConsoleRefusedError",
    "DeployCheck",
    "DeployProblem",
    "EventView",
    "ExpiredStats",
    "GcReport",
    "RequestView",
    "RunRecord",
    "RunSummary",
    "RunsPage",
    "ScheduleView",
    "StepView",
    "StreamView",
    "aabort_request",
    "abort_request",
    "acancel",
    "acheck_deploy",
    "acollect",
    "adead_letters",
    "aexpired_stats",
    "afork",
    "apause_schedule",
    "aredrive",
    "arelay",
    "aresume_schedule",
    "aretry",
    "aruns",
    "aschedules",
    "ashow",
    "atrigger_schedule",
    "cancel",
    "check_deploy",
    "collect",
    "dead_letters",
    "expired_stats",
    "fork",
    "pause_schedule",
    "redrive",
    "relay",
    "resume_schedule",
    "retry",
    "runs",
    "schedules",
    "show",
    "trigger_schedule",
]
