"""The console's page load times with many requests kept: 100,000 on SQLite, 10,000 on the emulators.

A store holds N run records (one request in ten running, the rest completed; workflows
``checkout`` and ``refund``), written straight into the store in batched commits by
:func:`benchmarks.runs_list.populate` (submitting 100,000 requests through workers would take
longer than the measurement is worth, and the console reads only the records). One real
``booking`` request, submitted and run by a worker, has a timeline to replay. The console runs
on a thread of this process; each page is fetched over HTTP from a client here (a full request:
connection, handler, store reads, rendering), after a warm-up fetch: the median of 9 fetches, or
of fewer if one takes over a second.

Pages: the first page of the list (50 requests), ``status=running`` and ``status=failed``
(none failed: the listing reads until it knows), ``workflow=refund``, the page after 1,000
listed (a cursor), a request id looked up exactly, a request id prefix (reads at most 5,000
records a page), a request's page without a timeline (a populated record: no input to
replay) and with one (the booking: its two memos replayed), and ``/api/runs``.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.common.backends import open_backend
from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from benchmarks.runs_list import populate
from idemflow import Idem, Tx, atomic, workflow
from idemflow.admin import runs
from idemflow.client import submit
from idemflow.console._server import Console
from idemflow.console._settings import ConsoleSettings
from idemflow.running.coordination import receive
from idemflow.stores.base import Store
from idemflow.worker import Worker

READING = """Reading the numbers: a page that the store's own listing can fill (the first page, a
cursor, a workflow on SQLite and Azure, ``running`` where an index of open runs exists) costs
about one page of records, whatever the table holds. A filter nothing matches costs a read of
every record it could match: ``status=failed`` with none failed reads the whole listing on SQLite
(100,000 records in about a third of a second) and on Azure Tables (10,000 in seconds on
Azurite), the open-runs index on DynamoDB. A request id prefix reads at most 5,000 records for a
page (here the newest 5,000, which hold none of the ids asked for: the page is empty and offers
the next one); an exact request id is one partition read on every store."""


def _hold(tx: Tx) -> int:
    tx.increment("held")
    return int(tx.get("held"))


def _release(tx: Tx, _held: object) -> None:
    tx.increment("held", -1)


def _pay(tx: Tx) -> dict[str, str]:
    tx.put("paid", True)
    return {"charge": "ch"}


@workflow("booking")
def booking(show: str) -> Generator[Idem[Any], Any, Any]:
    yield atomic("items", show, _hold, compensate=_release, name="hold")
    yield atomic("items", "pay-" + show, _pay, name="charge")
    return (yield receive("confirm"))


def pages(store: Store, count: int) -> dict[str, str]:
    deep = runs(store, limit=1000).next
    middle = f"req-{count // 2:07d}"
    workflow_of_middle = "refund" if (count // 2) % 7 == 0 else "checkout"
    return {
        "list, first page": "/",
        "list, status=running": "/?status=running",
        "list, status=failed (none)": "/?status=failed",
        "list, workflow=refund": "/?workflow=refund",
        "list, after 1,000 listed": f"/?after={deep}",
        "list, request id (exact)": f"/?id={middle}",
        "list, request id prefix": f"/?id={middle[:-2]}&match=prefix",
        "request page (record only)": f"/runs/{middle}?workflow={workflow_of_middle}",
        "request page (timeline)": "/runs/bench-booking?workflow=booking",
        "/api/runs": "/api/runs",
    }


def fetch(base: str, path: str) -> tuple[float, int, int]:
    parts = urlsplit(base)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=600)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    return time.perf_counter() - started, response.status, len(body)


def measure(console: Console, paths: dict[str, str]) -> dict[str, tuple[float, int, int]]:
    measured = {}
    for name, path in paths.items():
        fetch(console.url, path)  # warm: connections, caches
        seconds, status, size = fetch(console.url, path)
        assert status == 200, (name, status)
        times = [seconds]
        while sum(times) < 1.0 and len(times) < 9:
            times.append(fetch(console.url, path)[0])
        measured[name] = (statistics.median(times), len(times), size)
    return measured


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.console", description=__doc__)
    parser.add_argument("--stores", default="sqlite,moto,azurite")
    parser.add_argument("--quick", action="store_true", help="2,000 requests everywhere")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    out = args.out
    sizes = {"sqlite": 100_000, "moto": 10_000, "azurite": 10_000}
    if args.quick:
        sizes = dict.fromkeys(sizes, 2_000)
    kinds = [kind for kind in args.stores.split(",") if kind in sizes]
    report = Report("console", "The console's page load times", {"sizes": {k: sizes[k] for k in kinds}}, out)
    report.add(__doc__.split("\n\n", 1)[1].strip(), "")
    rows = []
    for kind in kinds:
        with open_backend(kind) as backend:
            tag = backend.tag("console")
            store = backend.store(tag, "items")
            queue = backend.queue(tag)
            began = time.perf_counter()
            populate(store, sizes[kind])
            filled = time.perf_counter() - began
            submit(booking("gala"), request_id="bench-booking", store=store, queue=queue)
            Worker([booking], store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=1.0)
            console = Console(ConsoleSettings(port=0), store, queue, [booking]).start()
            try:
                for name, (seconds, fetches, size) in measure(console, pages(store, sizes[kind])).items():
                    rows.append(
                        [
                            backend.label,
                            f"{sizes[kind]:,}",
                            name,
                            f"{seconds * 1000:,.1f}",
                            str(fetches),
                            f"{size:,}",
                        ]
                    )
                    report.data.setdefault("cells", []).append(
                        {"store": kind, "runs": sizes[kind], "page": name, "seconds": seconds, "bytes": size}
                    )
                    if name in ("list, first page", "request page (timeline)"):
                        label = "list" if name.startswith("list") else "request"
                        report.headline(f"console.{kind}.{sizes[kind]}.{label}_ms", round(seconds * 1000, 2))
            finally:
                console.close()
            print(f"{kind}: {sizes[kind]:,} run records written in {filled:.0f} s", flush=True)
    report.table(["store", "runs kept", "page", "ms (median)", "fetches", "bytes"], rows)
    report.add("", READING)
    path = report.write()
    print(path.read_text())
    return report


if __name__ == "__main__":
    main()
