"""The ``idemflow`` command, run as a user would (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import Idem, RetryPolicy, atomic, checkpoint, run, start, wait, workflow
from idemflow.admin import RunRecord
from idemflow.cli import main
from idemflow.client import RunStatus, status, submit
from idemflow.errors import InvalidInputError
from idemflow.records import run_ref
from idemflow.serialization import JSON, encode
from idemflow.stores import SqliteStore
from idemflow.stores.base import Committed, Insert, Put
from idemflow.testing.servers import Moto
from idemflow.worker import SqliteQueue, Worker
from tests.support.expiries import expiries


def idemflow(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "idemflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def test_status_and_gc_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "cli.sqlite3"
    store = SqliteStore(path)
    run(atomic("items", "p", lambda tx: tx.put("k", 1) or "ok"), request_id="r1", store=store)
    store.close()
    url = f"sqlite:{path}"
    shown = idemflow("status", "--store", url, "idem", "r1")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"status": "completed", "version": 1, "result": "ok"}
    assert json.loads(idemflow("status", "--store", url, "idem", "nope").stdout) == {"status": "unknown"}
    collected = idemflow("gc", "--store", url, "--older-than", "0s")
    assert collected.returncode == 0 and "collected 1 finished requests" in collected.stdout
    assert json.loads(idemflow("status", "--store", url, "idem", "r1").stdout) == {"status": "unknown"}


def test_errors_are_one_clear_line(tmp_path: Path) -> None:
    bad = idemflow("tables", "create", "--store", "nosuch:x", "items")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "store URL 'nosuch:…': unknown scheme" in bad.stderr
    bad_name = idemflow("tables", "create", "--store", f"sqlite:{tmp_path / 'x.sqlite3'}", "bad_name")
    assert bad_name.returncode == 2 and "invalid table" in bad_name.stderr
    bad_duration = idemflow("gc", "--store", "memory:", "--older-than", "soon")
    assert bad_duration.returncode == 2 and "duration" in bad_duration.stderr


def test_tables_create_on_dynamodb(moto: Moto) -> None:
    import boto3

    url = f"dynamodb:?endpoint={moto.endpoint}&region={moto.region}&prefix=cli"
    created = idemflow("tables", "create", "--store", url, "orders", "stock")
    assert created.returncode == 0, created.stderr
    client = boto3.client("dynamodb", endpoint_url=moto.endpoint, region_name=moto.region)
    names = {name for page in client.get_paginator("list_tables").paginate() for name in page["TableNames"]}
    assert {"cliorders", "clistock", "cliidemflowruns"} <= names


APP = """
from idemflow import atomic, workflow
from idemflow import checkpoint


@workflow("greeting")
def greeting(name):
    yield checkpoint()
    return (yield atomic("items", name, lambda tx: tx.put("greeted", True) or "hello " + name))


WORKFLOWS = [greeting]
"""


@workflow("greeting")
def greeting(name: str) -> Generator[Idem[Any], Any, Any]:
    """The same workflow as the project's (workers find workflows by name and input)."""
    yield checkpoint()
    return (yield atomic("items", name, lambda tx: tx.put("greeted", True) or "hello " + name))


@pytest.mark.parametrize("flavour", [["--log-steps"], ["--asyncio"]], ids=["threads", "asyncio"])
def test_worker_imports_workflows_from_the_current_directory(tmp_path: Path, flavour: list[str]) -> None:
    """`idemflow worker myapp.workflows:WORKFLOWS` in a project directory, nothing installed;
    on threads, or on an event loop (``--asyncio``)."""
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "workflows.py").write_text(textwrap.dedent(APP))
    store = SqliteStore(tmp_path / "store.sqlite3")
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    submit(greeting("ada"), request_id="g-1", store=store, queue=queue, signing_key="k")
    queue.close()
    # The console script, as a user runs it: its sys.path holds its own directory, not the current one.
    script = Path(sys.executable).with_name("idemflow")
    command = [str(script)] if script.exists() else [sys.executable, "-P", "-m", "idemflow.cli"]
    urls = [
        "--store",
        f"sqlite:{tmp_path / 'store.sqlite3'}",
        "--queue",
        f"sqlite:{tmp_path / 'queue.sqlite3'}",
    ]
    env = {**os.environ, "IDEMFLOW_SIGNING_KEY": "k", "PYTHONPATH": ""}
    worker = subprocess.run(
        [*command, "worker", "myapp.workflows:WORKFLOWS", *urls, "--idle-timeout", "0.5", *flavour],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr
    assert "1 finished" in worker.stderr  # progress goes to stderr, beside the log events
    engine_steps = [line for line in worker.stderr.splitlines() if line.startswith('{"event": "step"')]
    if "--log-steps" in flavour:  # the engine's own events: which request, step, outcome
        assert any(
            '"request_id": "g-1"' in line and '"outcome": "committed"' in line for line in engine_steps
        )
    else:
        assert engine_steps == []
    assert status(store, "greeting", "g-1").status is RunStatus.COMPLETED
    assert status(store, "greeting", "g-1").result == "hello ada"
    # Elsewhere the module is not found, and the error says so in one line.
    missing = subprocess.run(
        [*command, "worker", "myapp.workflows:WORKFLOWS", *urls, "--idle-timeout", "0.5"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2 and "cannot import 'myapp.workflows'" in missing.stderr
    store.close()


@pytest.mark.parametrize("listing", [["--json"], []], ids=["json", "lines"])
def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path, listing: list[str]) -> None:
    """`idemflow runs list | head -1`: the reader closes the pipe after one line; the command stops
    with 141 (a closed pipe's status), and no traceback reaches the terminal."""
    path = tmp_path / "many.sqlite3"
    store = SqliteStore(path)
    for batch in range(20):  # more than a pipe's buffer (64 KiB) of lines, written as run records
        rows = []
        for n in range(100):
            value: JSON = RunRecord("f" * 64, RunStatus.COMPLETED, result=n, finished_at=1.0e9 + n).to_json()
            rows.append(
                Insert(run_ref("listed", f"request-{batch:02d}-{n:03d}-{'x' * 40}"), value, encode(value))
            )
        store.commit(rows)
    store.close()
    listed = subprocess.Popen(
        [sys.executable, "-m", "idemflow.cli", "runs", "list", "--store", f"sqlite:{path}", *listing],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert listed.stdout is not None and listed.stderr is not None
    assert b"request-" in listed.stdout.readline()
    listed.stdout.close()  # as `head -1` exits
    errors = listed.stderr.read().decode()
    assert listed.wait(timeout=120) == 141
    assert "Traceback" not in errors and "BrokenPipeError" not in errors and "Exception ignored" not in errors


def test_worker_retention_is_for_requests_that_carry_none(tmp_path: Path) -> None:
    """``--retention`` keeps the rows of a request whose record stores no retention (written before
    format 5) that long; one that stores its own keeps it; a retention that is no duration is one
    clear line."""
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "workflows.py").write_text(textwrap.dedent(APP))
    store = SqliteStore(tmp_path / "store.sqlite3")
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    for name in ("old", "new"):
        submit(greeting(name), request_id=name, store=store, queue=queue, policy=RetryPolicy(retention=600))
    queue.close()
    row_ref = run_ref("greeting", "old")
    row = store.read(row_ref)
    assert row is not None
    older: Any = row.value
    older["in"].pop("rn")  # as format 4 wrote it
    assert isinstance(store.commit([Put(row_ref, older, encode(older))]), Committed)
    urls = [
        "--store",
        f"sqlite:{tmp_path / 'store.sqlite3'}",
        "--queue",
        f"sqlite:{tmp_path / 'queue.sqlite3'}",
    ]
    began = time.time()
    command = [sys.executable, "-m", "idemflow.cli", "worker", "myapp.workflows:WORKFLOWS", *urls]
    worker = subprocess.run(
        [*command, "--idle-timeout", "0.5", "--retention", "120"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr
    kept = expiries(store)
    assert (
        status(store, "greeting", "old").status
        is status(store, "greeting", "new").status
        is RunStatus.COMPLETED
    )
    for request, retention in (("old", 120), ("new", 600)):
        record = kept[(row_ref.table, request, row_ref.key)]
        assert record is not None and began + retention - 1 <= record <= time.time() + retention + 1
    refused = subprocess.run(
        [*command, "--retention", "0"], cwd=project, capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 2 and "--retention must be a finite number of seconds > 0" in refused.stderr
    store.close()


def test_runs_list_pages_with_a_cursor(tmp_path: Path) -> None:
    """``--limit`` prints a page and the cursor of the next (stderr for lines, a last JSON line
    ``{"next": ...}`` with ``--json``); ``--after`` continues, newest first on SQLite; a cursor
    no page printed is one clear line."""
    path = tmp_path / "paged.sqlite3"
    store = SqliteStore(path)
    for n in range(5):
        value: JSON = RunRecord("f" * 64, RunStatus.RUNNING, started_at=1.8e9 + n).to_json()
        store.commit([Insert(run_ref("listed", f"r{n}"), value, encode(value))])
    store.close()
    url = f"sqlite:{path}"
    first = idemflow("runs", "list", "--store", url, "--limit", "2", "--json")
    assert first.returncode == 0, first.stderr
    *shown, last = [json.loads(line) for line in first.stdout.splitlines()]
    assert [one["request_id"] for one in shown] == ["r4", "r3"] and set(last) == {"next"}
    second = idemflow("runs", "list", "--store", url, "--limit", "2", "--after", last["next"])
    assert [line.split()[-1] for line in second.stdout.splitlines()] == ["r2", "r1"]
    assert "2 request(s), newest first; next page: --after " in second.stderr
    cursor = second.stderr.rsplit("--after ", 1)[1].strip()
    third = idemflow("runs", "list", "--store", url, "--limit", "2", "--after", cursor, "--json")
    assert [json.loads(line)["request_id"] for line in third.stdout.splitlines()] == ["r0"]
    bad = idemflow("runs", "list", "--store", url, "--after", "garbage")
    assert bad.returncode == 2 and "not a" in bad.stderr and "Traceback" not in bad.stderr


def test_runs_list_finds_requests_by_their_tags_and_runs_show_prints_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tag KEY=VALUE`` (repeatable: every one) lists the requests carrying the tags, in lines
    and JSON; ``runs show`` prints them; a tag without ``=`` is one clear line, nothing listed."""
    path = tmp_path / "tagged.sqlite3"
    store = SqliteStore(path)
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    tagged = {"ann": {"customer": "c-1", "region": "eu"}, "bob": {"customer": "c-1"}, "cy": None}
    for name, tags in tagged.items():
        submit(greeting(name), request_id=name, store=store, queue=queue, tags=tags)
    queue.close()
    store.close()
    url = f"sqlite:{path}"
    assert main(["runs", "list", "--store", url, "--tag", "customer=c-1", "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(one["request_id"], one["tags"]) for one in shown] == [
        ("bob", {"customer": "c-1"}),
        ("ann", {"customer": "c-1", "region": "eu"}),
    ]
    assert main(["runs", "list", "--store", url, "--tag", "customer=c-1", "--tag", "region=eu"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert "  ann  " in line and line.endswith("customer=c-1 region=eu")
    assert (
        main(
            ["runs", "show", "--store", url, "--workflows", "tests.cli.test_cli:greeting", "greeting", "ann"]
        )
        == 0
    )
    assert "  tags: customer=c-1 region=eu" in capsys.readouterr().out.splitlines()
    with pytest.raises(SystemExit) as refused:
        main(["runs", "list", "--store", url, "--tag", "customer"])
    said = capsys.readouterr()
    assert refused.value.code == 2 and "argument --tag: a tag is key=value" in said.err and not said.out
    assert main(["runs", "list", "--store", url, "--tag", "k=a", "--tag", "k=b"]) == 2
    assert "tag 'k' is asked for with two values" in capsys.readouterr().err


def test_gc_counts_expired_rows_and_vacuums_on_sqlite(tmp_path: Path) -> None:
    """``gc --stats`` counts the expired rows still in the file by kind; ``gc --vacuum`` rewrites
    the file; neither needs ``--older-than``, and a store with no file to vacuum is refused."""
    path = tmp_path / "cli.sqlite3"
    store = SqliteStore(path, expire_every=None)
    store.commit([Insert(run_ref("wf", f"r{n}"), {"status": "x"}, '{"status":"x"}', 1.0) for n in range(3)])
    store.close()
    url = f"sqlite:{path}"
    counted = idemflow("gc", "--store", url, "--stats")
    assert counted.returncode == 0, counted.stderr
    stats = json.loads(counted.stdout)
    assert stats["expired_rows"] == {
        "memos": 0,
        "run records": 3,
        "outbox/inbox": 0,
        "events/streams": 0,
        "other": 0,
    }
    assert stats["oldest_seconds_past_expiry"]["run records"] > 1e9
    vacuumed = idemflow("gc", "--store", url, "--vacuum")
    assert vacuumed.returncode == 0 and vacuumed.stdout.startswith("vacuumed: "), vacuumed.stderr
    refused = idemflow("gc", "--store", "memory:", "--vacuum")
    assert refused.returncode == 2 and "no file to vacuum" in refused.stderr
    nothing = idemflow("gc", "--store", url)
    assert nothing.returncode == 2 and "--older-than" in nothing.stderr


def test_python_dash_m_idemflow_is_the_command(tmp_path: Path) -> None:
    """Where the ``idemflow`` script is not on the PATH, ``python -m idemflow`` is the same command."""
    url = f"sqlite:{tmp_path / 'm.sqlite3'}"
    SqliteStore(tmp_path / "m.sqlite3").close()
    via_module = subprocess.run(
        [sys.executable, "-m", "idemflow", "status", "--store", url, "checkout", "r-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert via_module.returncode == idemflow("status", "--store", url, "checkout", "r-1").returncode
    assert via_module.stdout == idemflow("status", "--store", url, "checkout", "r-1").stdout
    assert "unknown" in via_module.stdout


def test_workflows_name_one_workflow_or_a_list_and_nothing_else(tmp_path: Path, monkeypatch: Any) -> None:
    """``--workflows app:book`` names one workflow as well as ``app:WORKFLOWS`` names a list (a
    stranger's first console run named one and met a traceback); anything else is refused."""
    from idemflow.cli.loading import load_workflows

    (tmp_path / "oneflow.py").write_text(
        "from idemflow import workflow, atomic\n"
        "@workflow('book')\n"
        "def book(seat):\n"
        "    yield atomic('seats', 's', lambda tx: tx.put(seat, 1))\n"
        "WORKFLOWS = [book]\n"
        "NAMES = ['book']\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [flow.name for flow in load_workflows("oneflow:book")] == ["book"]
    assert [flow.name for flow in load_workflows("oneflow:WORKFLOWS")] == ["book"]
    with pytest.raises(InvalidInputError, match="not a @workflow"):
        load_workflows("oneflow:NAMES")
    with pytest.raises(InvalidInputError, match="MODULE:ATTR"):
        load_workflows("oneflow")


@pytest.mark.parametrize(
    "argv",
    [
        ["dead-letters", "list"],
        ["dead-letters", "redrive"],
        ["queue", "stats"],
        ["queue", "stats", "--json"],
        ["retry", "--store", "sqlite:{store}", "checkout", "r-1"],
    ],
    ids=["dead-letters-list", "dead-letters-redrive", "queue-stats", "queue-stats-json", "retry"],
)
def test_a_mistyped_sqlite_queue_path_is_an_error_naming_it_and_creates_nothing(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Commands that read a queue (or feed the workers' one) never make an empty queue at a path
    nobody reads: they exit non-zero naming the path, as the store commands do for a database."""
    store = tmp_path / "store.sqlite3"
    SqliteStore(store).close()
    typo = tmp_path / "queeu.sqlite3"
    code = main([arg.format(store=store) for arg in argv] + ["--queue", f"sqlite:{typo}"])
    assert code == 2 and f"no queue file at {str(typo)!r}" in capsys.readouterr().err
    assert not typo.exists()


def test_a_read_only_queue_command_never_creates_a_cloud_queue(
    moto: Moto, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    url = moto.queue_url(f"typo{uuid.uuid4().hex[:8]}", Path("."), visibility_timeout=30)
    assert main(["queue", "stats", "--queue", url]) == 2
    assert "idemflow: error:" in capsys.readouterr().err
    sqs = boto3.client("sqs", endpoint_url=moto.endpoint, region_name=moto.region)
    name = url.split(":", 1)[1].split("?", 1)[0]
    assert not [found for found in sqs.list_queues().get("QueueUrls", []) if name in found]


def test_cancel_with_children_cancels_the_requests_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    @workflow("cli-kid")
    def kid(name: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield atomic("items", name, lambda tx: tx.put("kid", 1) or "kid")
        return "kid"

    @workflow("cli-parent")
    def parent(name: str) -> Generator[Idem[Any], Any, Any]:
        child = yield start(kid(name), request_id=name + "-kid")
        return (yield wait(child))

    path = tmp_path / "cascade.sqlite3"
    store, queue = SqliteStore(path), SqliteQueue(str(tmp_path / "q.db"))
    submit(parent("p"), request_id="p", store=store, queue=queue)  # waits for its child, queued
    url = f"sqlite:{path}"
    assert main(["cancel", "--store", url, "--children", "--reason", "stop", "cli-parent", "p"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"request_id": "p", "was": "running", "cancelled": True, "children": True}
    assert [status(store, *name).status for name in [("cli-parent", "p"), ("cli-kid", "p-kid")]] == [
        RunStatus.CANCELLED
    ] * 2
    Worker([parent, kid], store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.3)
    assert status(store, "cli-kid", "p-kid").status is RunStatus.CANCELLED  # its pointer ran nothing
    assert main(["cancel", "--store", url, "cli-parent", "p"]) == 0  # again: nothing to do
    assert json.loads(capsys.readouterr().out) == {"request_id": "p", "was": "cancelled", "cancelled": False}
    store.close()
    queue.close()
