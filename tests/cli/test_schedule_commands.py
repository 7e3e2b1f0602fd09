"""``idemflow schedules list|pause|resume|trigger`` and ``idemflow worker --schedules``, run as a
user would (real subprocesses, on SQLite), with the project's schedules imported from the current
directory."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from idemflow.admin import resume_schedule, schedules
from idemflow.cli.loading import load_schedules
from idemflow.client import RunStatus, status
from idemflow.stores import SqliteStore

APP = """
from idemflow import Schedule, atomic, checkpoint, workflow


@workflow("cli-tick")
def ticked(kind, tick):
    yield checkpoint()
    return (yield atomic("items", kind, lambda tx: tx.increment(tick) and None or tick))


SCHEDULES = [
    Schedule("hourly", ticked, cron="0 * * * *", input="hourly", catchup="all"),
    Schedule("nightly", ticked, cron="0 3 * * *", input="nightly", timezone="Europe/Berlin"),
]
"""


def idemflow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "idemflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def _project(tmp_path: Path) -> tuple[Path, list[str], list[str]]:
    project = tmp_path / "project"
    (project / "schedapp").mkdir(parents=True)
    (project / "schedapp" / "__init__.py").write_text("")
    (project / "schedapp" / "timing.py").write_text(textwrap.dedent(APP))
    store = ["--store", f"sqlite:{tmp_path / 'store.sqlite3'}"]
    queue = ["--queue", f"sqlite:{tmp_path / 'queue.sqlite3'}"]
    return project, store, queue


def test_list_pause_resume_and_trigger(tmp_path: Path) -> None:
    project, store, queue = _project(tmp_path)
    SqliteStore(tmp_path / "store.sqlite3").close()  # provisioned, as `idemflow tables create` does
    defined = ["--schedules", "schedapp.timing:SCHEDULES"]
    listed = idemflow("schedules", "list", *store, *defined, "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(row["name"], row["paused"], row["seen"], row["last_tick"]) for row in rows] == [
        ("hourly", False, False, None),
        ("nightly", False, False, None),
    ]
    hour = (math.floor(time.time() / 3600) + 1) * 3600
    assert rows[0]["next_tick"] in (hour, hour - 3600)  # the next hour (unless one began since)
    paused = idemflow("schedules", "pause", *store, "nightly", cwd=project)
    assert paused.returncode == 0 and paused.stdout.startswith("nightly: paused"), paused.stderr
    table = idemflow("schedules", "list", *store, *defined, cwd=project)
    assert "nightly\tcli-tick\t'0 3 * * *' Europe/Berlin\tpaused\tlast -\tnext -" in table.stdout
    resumed = idemflow("schedules", "resume", *store, "nightly", cwd=project)
    assert resumed.returncode == 0 and resumed.stdout.startswith("nightly: resumed"), resumed.stderr
    at = ["--at", "2027-01-16T03:00:00+01:00"]
    fired = idemflow("schedules", "trigger", *store, *queue, *defined, "nightly", *at, cwd=project)
    assert fired.returncode == 0, fired.stderr
    assert fired.stdout.strip() == "nightly@2027-01-16T02:00:00Z: running"
    again = idemflow("schedules", "trigger", *store, *queue, *defined, "nightly", *at, cwd=project)
    assert again.stdout == fired.stdout
    unknown = idemflow("schedules", "trigger", *store, *queue, *defined, "weekly", cwd=project)
    assert unknown.returncode == 2 and "schedule 'weekly': no schedule of this name" in unknown.stderr
    bad = idemflow("schedules", "pause", *store, "a b", cwd=project)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "a name is" in bad.stderr
    wrong = idemflow("schedules", "list", *store, "--schedules", "schedapp.timing:ticked", cwd=project)
    assert wrong.returncode == 2 and "not a Schedule" in wrong.stderr


def test_a_worker_with_schedules_fires_the_missed_ticks_and_finishes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hourly schedule was last resumed two hours ago: the worker's first pass fires the two
    ticks since (catch-up ``all``), and the worker finishes both."""
    project, store, queue = _project(tmp_path)
    sqlite = SqliteStore(tmp_path / "store.sqlite3")
    resume_schedule(sqlite, "hourly", clock=lambda: time.time() - 2 * 3600)
    command = [
        "worker",
        "schedapp.timing:WORKFLOWS",
        *store,
        *queue,
        "--schedules",
        "schedapp.timing:SCHEDULES",
    ]
    (project / "schedapp" / "timing.py").write_text(textwrap.dedent(APP) + "\nWORKFLOWS = [ticked]\n")
    worker = idemflow(*command, "--schedule-every", "0.2", "--idle-timeout", "1.5", cwd=project)
    assert worker.returncode == 0, worker.stderr
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    [hourly, nightly] = schedules(sqlite, load_schedules("schedapp.timing:SCHEDULES"))
    assert hourly.last_tick is not None and nightly.seen
    ticks: list[Any] = [hourly.last_tick - 3600, hourly.last_tick]
    for tick in ticks:
        request = time.strftime("hourly@%Y-%m-%dT%H:%M:%SZ", time.gmtime(tick))
        assert status(sqlite, "cli-tick", request).status is RunStatus.COMPLETED, worker.stderr
