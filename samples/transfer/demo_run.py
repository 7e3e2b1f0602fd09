"""One whole run of the transfer demo (:func:`run_harness`) and what it found (:class:`Report`).

Importable without the command line: the crash tests and the chaos suite run it with a fixed seed
and smaller sizes, and the samples' shared harness uses :func:`reset` for its own SQLite files.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from idemflow import run
from idemflow.stores import SqliteStore
from samples.transfer.demo_requests import Settings, account_names, make_requests, make_submissions
from samples.transfer.demo_workers import drive
from samples.transfer.workflows import Outcome, TransferRequest, Verdict, check, open_account


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a run did and found; ``problems`` is empty when it passed."""

    settings: Settings
    requests: int
    submissions: int
    kills: int
    resent: int
    """Unanswered submissions of killed workers, handed to their replacements."""
    retried: int
    """Submissions a worker gave back after a transient error (e.g. conflicts past the bound)."""
    raced: int
    """Duplicates handed out while another copy of the request was running on another worker."""
    verdict: Verdict
    problems: tuple[str, ...]
    failed: frozenset[str]
    """Checks that found a problem: those of :data:`~samples.transfer.workflows.CHECKS`,
    ``answers`` (copies of a request answered differently) and ``run`` (the harness)."""
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self, *, max_problems: int = 12) -> str:
        """A few lines a person wants to read, ending in PASS or FAIL."""
        s, v = self.settings, self.verdict
        to_ghosts = v.aborted.get("no such account", 0)
        poor = v.aborted.get("insufficient funds", 0)
        other = sum(v.aborted.values()) - to_ghosts - poor

        def mark(check: str) -> str:
            return "FAIL" if check in self.failed else " ok "

        lines = [
            f"idemflow transfer demo: {s.path}, seed {s.seed}" + (" (unkeyed)" if s.unkeyed else ""),
            f"  requests  {self.requests} transfers sent {self.submissions} times: "
            f"{self.submissions - self.requests} duplicates, {self.raced} racing a copy on another worker",
            f"  crashes   {self.kills} SIGKILLs of the {s.workers} workers; replacements retried "
            f"{self.resent} unanswered submissions"
            + (f" ({self.retried} more after a transient error)" if self.retried else ""),
            f"  outcome   {v.completed} completed, {sum(v.aborted.values())} aborted "
            f"({to_ghosts} to a missing account, {poor} insufficient funds"
            + (f", {other} other)" if other else ")"),
            f"  [{mark('money')}] money conserved: {v.money_before} before, {v.money_after} after",
            f"  [{mark('audit')}] exactly once: {v.audit_rows} audit rows for {v.completed} completed "
            "transfers",
            f"  [{mark('balances')}] balances: each of the {v.accounts} accounts equals one replay of the "
            "completed transfers",
            f"  [{mark('refunds')}] compensation: {v.refunds} refunds for the {v.expected_refunds} "
            "transfers aborted after their debit",
            f"  [{mark('answers')}] answers: every copy of a request got the same answer",
        ]
        if "run" in self.failed:
            lines.append(f"  [{mark('run')}] the run itself went wrong")
        if self.ok:
            lines.append(f"PASS in {self.seconds:.1f} s: every request took effect exactly once")
        else:
            lines.append(f"FAIL in {self.seconds:.1f} s: {len(self.problems)} problems, the first:")
            lines.extend(f"  - {problem}" for problem in self.problems[:max_problems])
        return "\n".join(lines)


def reset(path: Path) -> None:
    """Delete the SQLite file and its WAL companions, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def run_harness(settings: Settings) -> Report:
    """Run the whole demo once and verify it (see :mod:`samples.transfer.demo`).

    Blocking; it starts and reaps its own worker processes. For example::

        report = run_harness(Settings(path=Path("/tmp/t.sqlite3"), workers=2, requests=50, seed=1))
        assert report.ok, report.render()
    """
    started = time.monotonic()
    rng = random.Random(settings.seed)
    reset(settings.path)
    store = SqliteStore(settings.path)
    try:
        opening = {name: settings.balance for name in account_names(settings.accounts)}
        for name, balance in opening.items():
            run(open_account({"account": name, "balance": balance}), request_id=f"open-{name}", store=store)
        requests = make_requests(settings, rng)
        submissions = make_submissions(requests, settings, rng)
        answers, stats, problems = drive(settings, submissions, rng, started)
        outcomes: dict[str, tuple[TransferRequest, Outcome]] = {}
        for request_id, req in requests:
            got = answers.get(request_id, [])
            if not got:
                problems.append(("answers", f"{request_id} never got an answer"))
                continue
            different = [other for other in got[1:] if other != got[0]]
            if different:
                problems.append(("answers", f"{request_id} answered {got[0]} and {different[0]}"))
            outcomes[request_id] = (req, got[0])
        verdict = check(store, opening=opening, outcomes=outcomes)
    finally:
        store.close()
    return Report(
        settings=settings,
        requests=len(requests),
        submissions=len(submissions),
        kills=stats["kills"],
        resent=stats["resent"],
        retried=stats["retried"],
        raced=stats["raced"],
        verdict=verdict,
        problems=verdict.problems + tuple(message for _check, message in problems),
        failed=frozenset(check for check, _message in problems) | verdict.failed,
        seconds=time.monotonic() - started,
    )


__all__ = ["Report", "reset", "run_harness"]
