"""The ``idemflow`` command, run as a user would (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from idemflow import SqliteStore, atomic, run
from tests.servers import Moto


def idemflow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "idemflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_status_and_gc_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "cli.sqlite3"
    store = SqliteStore(path)
    run(atomic("items", "p", lambda tx: tx.put("k", 1) or "ok"), request_id="r1", store=store)
    store.close()
    url = f"sqlite:{path}"
    shown = idemflow("status", "--store", url, "idem", "r1")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"status": "completed", "result": "ok"}
    assert json.loads(idemflow("status", "--store", url, "idem", "nope").stdout) == {"status": "pending"}
    collected = idemflow("gc", "--store", url, "--older-than", "0s")
    assert collected.returncode == 0 and "collected 1 finished requests" in collected.stdout
    assert json.loads(idemflow("status", "--store", url, "idem", "r1").stdout) == {"status": "pending"}


def test_errors_are_one_clear_line(tmp_path: Path) -> None:
    bad = idemflow("tables", "create", "--store", "nosuch:x", "items")
    assert bad.returncode == 2 and "unknown store scheme" in bad.stderr and "Traceback" not in bad.stderr
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
