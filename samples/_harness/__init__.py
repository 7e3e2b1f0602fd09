"""The load-and-crash machinery the samples' command lines share.

- :class:`HttpClient` calls an API on one or more servers, retrying like a
  patient client (same ``Idempotency-Key``, next server); :func:`send_all`
  sends every request 2-4 times from concurrent users, copies racing and
  reordered; :func:`disagreements` finds copies answered differently;
  :func:`settle` waits for the workers to finish what was answered ``202``
  and puts the final answers in place; :class:`Progress` draws the bar.
- :class:`Fleet` runs child processes (API servers, ``idemflow worker``
  processes), SIGKILLs and restarts them, and restarts any that exit on
  their own, as a supervisor would; :class:`Killer` SIGKILLs a random one
  each time the load passes a threshold (a sample may bring its own killer);
  :func:`run_demo` is a whole demo's crash cycle: servers and workers on one
  store and queue, killed under load, then ``check``; :class:`DemoReport` and
  :class:`LoadReport` what it found.
- :class:`Sample`: the ``serve | load | check | demo`` command line every
  sample has (:meth:`Sample.main`), given the sample's API and commands.

One module for each: :mod:`~samples._harness.clients`, :mod:`~samples._harness.fleet`,
:mod:`~samples._harness.demo` and :mod:`~samples._harness.command`; this package re-exports
their names, so a sample imports just ``samples._harness``.

>>> from samples._api import Answer
>>> answers = {"r1": [Answer(200, {"n": 1}), Answer(200, {"n": 1})], "r2": [Answer(200), Answer(409)]}
>>> disagreements(answers)
["request 'r2' answered Answer(status=200, body={}) and Answer(status=409, body={})"]
"""

from __future__ import annotations

from samples._harness.clients import HttpClient, Progress, Send, disagreements, send_all, settle
from samples._harness.command import Option, Sample, command_parser, demo_seed
from samples._harness.demo import (
    DEMO_VISIBILITY_TIMEOUT,
    Crashes,
    DemoReport,
    FleetSettings,
    Kills,
    LoadReport,
    Verdict,
    open_with,
    run_demo,
)
from samples._harness.fleet import ROOT, Child, Fleet, Killer, free_port

__all__ = [
    "DEMO_VISIBILITY_TIMEOUT",
    "ROOT",
    "Child",
    "Crashes",
    "DemoReport",
    "Fleet",
    "FleetSettings",
    "HttpClient",
    "Killer",
    "Kills",
    "LoadReport",
    "Option",
    "Progress",
    "Sample",
    "Send",
    "Verdict",
    "command_parser",
    "demo_seed",
    "disagreements",
    "free_port",
    "open_with",
    "run_demo",
    "send_all",
    "settle",
]
