"""Workloads 4 to 7: the survey and auction samples' asynchronous demos, killed and faulty,
on SQLite and (6, 7) on AWS's DynamoDB Local under the service's transaction conflicts.

The samples' own demos (:func:`samples.survey.cli.run_demo`, :func:`samples.auction.cli.run_demo`):
API servers answering at the checkpoint and worker processes finishing the workflows, on one
SQLite store and queue; every request sent 2-4 times, copies racing on different servers and
reordered; servers and workers SIGKILLed at random and restarted. The servers and workers run
over a faulty store (``python -m samples.chaos serve|worker``, :mod:`samples.chaos.children`),
and the workers also exit right after some commits. :class:`RoundFiles` (fresh files, the
processes' command lines, the tally) serves the deploy workload too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from samples._harness import Crashes
from samples.chaos.faults import DIED
from samples.chaos.monitor import Monitor, watching
from samples.chaos.report import Options, Totals
from samples.transfer.demo import reset


@dataclass(frozen=True)
class RoundFiles:
    """Fresh files of one round of a sample's demo, and where its servers and workers find them."""

    sample: str
    path: Path
    queue: str
    log: Path
    seed: int

    @classmethod
    def fresh(
        cls, sample: str, opts: Options, rng: random.Random, round_no: int, visibility: float = 2.0
    ) -> RoundFiles:
        folder = opts.workdir / f"{sample}-{round_no}"
        path, queue, log = folder / f"{sample}.sqlite3", folder / "queue.sqlite3", folder / "faults.log"
        reset(path)
        reset(queue)
        log.unlink(missing_ok=True)
        url = f"sqlite:{queue}?visibility_timeout={visibility:g}"
        return cls(sample, path, url, log, rng.randrange(1 << 30))

    def processes(self, opts: Options) -> dict[str, Any]:
        """The :class:`~samples._harness.FleetSettings` fields: one store and queue, faulty servers and
        workers (``python -m samples.chaos serve|worker``), workers exiting after 1% of their commits."""
        faults = ("--log", str(self.log), "--fault-rate", str(opts.fault_rate))
        return {
            "store": f"sqlite:{self.path}",
            "queue": self.queue,
            "kills": 4 if opts.quick else 12,
            "server": ("-m", "samples.chaos", "serve", self.sample, *faults),
            "worker": ("-m", "samples.chaos", "worker", self.sample, *faults, "--die", "0.01"),
        }

    def tally(
        self,
        totals: Totals,
        requests: int,
        sent: int,
        crashes: Crashes,
        monitor: Monitor,
        problems: list[str],
    ) -> None:
        """Add the round to ``totals``; dead letters and processes that exited otherwise are anomalies."""
        from idemflow.worker import open_queue

        queue = open_queue(self.queue)
        dead = [f"dead-lettered: {reason}" for _body, reason in queue.dead_letters()]
        queue.close()
        odd = [f"a {kind} exited with status {status}" for kind, status in crashes.exits if status != DIED]
        totals.requests += requests
        totals.submissions += sent
        totals.checks += monitor.checks
        totals.kills += sum(crashes.kills.values()) + sum(crashes.exits.values())
        totals.faults += self.log.stat().st_size if self.log.exists() else 0
        prefix = f"{self.sample} round {self.path.parent.name} (seed {self.seed})"
        problems = [*problems, *monitor.problems, *dead, *odd]
        totals.anomalies += [f"{prefix}: {problem}" for problem in problems]


CONFLICT_RATE = 0.05
"""On DynamoDB Local: the share of calls that also meet a phantom transaction (besides real overlaps)."""


def _store(files: RoundFiles, opts: Options, on_dynamodb: bool) -> tuple[dict[str, Any], Path | str]:
    """The fleet's fields and what the monitor watches: the round's SQLite file, or a fresh
    prefix on DynamoDB Local with the service's transaction conflicts emulated in every process."""
    processes = files.processes(opts)
    if not on_dynamodb:
        return processes, files.path
    assert opts.dynamodb is not None
    prefix = f"ch{files.path.parent.name.replace('-', '')}{files.seed}"
    url = f"dynamodb:?endpoint={opts.dynamodb}&region=us-east-1&prefix={prefix}&conflicts={CONFLICT_RATE}"
    return {**processes, "store": url}, url


def _survey(opts: Options, rng: random.Random, round_no: int, totals: Totals, on_dynamodb: bool) -> None:
    from samples.survey import cli, workflows

    files = RoundFiles.fresh("survey", opts, rng, round_no)
    load = cli.LoadSettings(responses=40 if opts.quick else 300, seed=files.seed)
    processes, watched = _store(files, opts, on_dynamodb)
    settings = cli.DemoSettings(**processes, load=load)
    with watching(watched, lambda store: list(workflows.check(store, settled=False).problems)) as monitor:
        report = cli.run_demo(settings)
    problems = [*report.load.problems, *report.verdict.problems]
    files.tally(totals, load.responses, report.load.sent, report.crashes, monitor, problems)


def _auction(opts: Options, rng: random.Random, round_no: int, totals: Totals, on_dynamodb: bool) -> None:
    from samples.auction import cli, closing, workflows

    files = RoundFiles.fresh("auction", opts, rng, round_no)
    if opts.quick:
        load = cli.LoadSettings(bids=40, items=3, window=2.0, seed=files.seed)
    else:
        load = cli.LoadSettings(bids=200, window=3.0, seed=files.seed)
    processes, watched = _store(files, opts, on_dynamodb)
    # The suite's short run shares 2 cores with the rest of the suite: closes may be late there.
    settings = cli.DemoSettings(
        **processes, load=load, slack=closing.LOADED_SLACK if opts.quick else closing.SLACK
    )
    with watching(watched, lambda store: list(workflows.check(store, settled=False).problems)) as monitor:
        report = cli.run_demo(settings)
    problems = [*report.load.problems, *report.verdict.problems]
    files.tally(totals, load.bids, report.load.sent, report.crashes, monitor, problems)


def survey_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    _survey(opts, rng, round_no, totals, on_dynamodb=False)


def auction_killed(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    _auction(opts, rng, round_no, totals, on_dynamodb=False)


def survey_on_dynamodb(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    _survey(opts, rng, round_no, totals, on_dynamodb=True)


def auction_on_dynamodb(opts: Options, rng: random.Random, round_no: int, totals: Totals) -> None:
    _auction(opts, rng, round_no, totals, on_dynamodb=True)
