"""What the transactional outbox costs per ``submit``, against the previous release.

Two idemflow versions run the same workload side by side in one run:

- **baseline**: the library at a git revision (``--baseline``; by default
  :data:`PREVIOUS_RELEASE`, the last commit before the outbox), extracted
  with ``git archive`` into a temporary folder;
- **candidate**: the work tree, its ``idemflow/`` copied into a temporary
  folder when the run starts (edits made meanwhile do not mix in), or a
  revision given by ``--candidate``.

Each runs in its own subprocess (:mod:`benchmarks._outbox_child`) with its
idemflow first on ``sys.path``, on its own fresh tables of the same backend
(one SQLite folder; one moto server for DynamoDB and one for SQS; one
Azurite), driven round by round by this process: baseline, candidate,
candidate, baseline, ... (the order rotates), so the machine's drift hits
both alike. Only one subprocess works at a time.

The workload is ``tests.async_workflows.survey`` with a checkpoint after step
1, submitted with a new request id each time: ``submit`` runs step 1 and
hands the rest to the queue. Per round, each variant times ``per-round``
submits back to back (the round's sample is their median), then flushes the
store's background writes and lets a worker finish the requests, untimed.
Latency ratios are candidate / baseline per round, summarized by their
median and IQR. On moto and Azurite a third variant runs in the rotation:
the candidate with each submit's background write awaited (untimed) before
the next submit, to tell the critical path's own cost from the contention
of that write with the next submit (moto serves one request at a time).

Counted per submit: backend calls on the client's critical path (the store's
own count, :func:`benchmarks._counting.backend_calls`, minus its cache writes,
+ the queue send), the store API calls behind them (reads, commits), rows and
logical bytes written, the message body, and off the critical path the ``commit_cache`` writes (the
candidate's deletion of the outbox entry: a background thread on DynamoDB and
Azure, on the caller's thread, un-fsynced, on SQLite — so there it is inside
the measured latency). Also what the worker does to finish the request and
what one pass of the candidate's outbox relay costs (every worker runs one
every ``relay_every`` seconds).

Run: ``python -m benchmarks outbox [--stores sqlite,moto,azurite] [--quick]``, or
``python -m benchmarks.outbox --baseline REV [--candidate REV] ...`` for other versions.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks._backends import DEFAULT_KINDS, LABELS
from benchmarks._report import Report, fmt_ratio
from benchmarks._stats import RESULTS, paired_ratio, percentile

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("baseline", "candidate")
SETTLED = "candidate, deletes awaited"
"""The candidate again, each submit's background write awaited (untimed) before the next submit."""
RELAY_PASSES = 5
PREVIOUS_RELEASE = "5bd1831"
"""The last commit before the transactional outbox (10ccdb1, "Continuations keep the promise")."""
BOOT = (
    "import runpy, sys; sys.path[:0] = sys.argv[1:3]; "
    "runpy.run_module('benchmarks._outbox_child', run_name='__main__', alter_sys=True)"
)
"""The subprocess: ``python -c BOOT <idemflow root> <repository> <spec>``; the root goes first on
sys.path (before the repository, the working directory and the editable install's finder)."""


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


@contextlib.contextmanager
def revision_tree(revision: str) -> Iterator[tuple[Path, str]]:
    """``idemflow/`` at ``revision``, extracted into a temporary folder: (folder, commit)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}").decode().strip()
    with tempfile.TemporaryDirectory(prefix="idemflow-revision-") as folder:
        archive = _git("archive", "--format=tar", commit, "idemflow")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder), commit


@contextlib.contextmanager
def work_tree_snapshot() -> Iterator[tuple[Path, str]]:
    """``idemflow/`` of the work tree copied into a temporary folder, so that edits made while the
    benchmark runs do not mix versions within it: (folder, a digest of its files)."""
    with tempfile.TemporaryDirectory(prefix="idemflow-candidate-") as folder:
        shutil.copytree(
            ROOT / "idemflow", Path(folder) / "idemflow", ignore=shutil.ignore_patterns("__pycache__")
        )
        digest = hashlib.sha256()
        for path in sorted((Path(folder) / "idemflow").rglob("*")):
            if path.is_file():
                digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
        yield Path(folder), digest.hexdigest()[:12]


@contextlib.contextmanager
def candidate_tree(revision: str | None, baseline: str) -> Iterator[tuple[Path, str]]:
    """The candidate's ``idemflow/``: the work tree's (``revision`` None) or a revision's; with a
    description saying which, and how many of its files differ from the baseline commit."""
    if revision is None:
        with work_tree_snapshot() as (folder, digest):
            changed = _git("diff", "--name-only", baseline, "--", "idemflow").decode().split()
            untracked = _git("ls-files", "--others", "--exclude-standard", "--", "idemflow").decode().split()
            count = len({*changed, *untracked})
            yield folder, f"the work tree's idemflow (snapshot {digest}; {count} files differ)"
    else:
        with revision_tree(revision) as (folder, commit):
            count = len(_git("diff", "--name-only", baseline, commit, "--", "idemflow").decode().split())
            yield folder, f"idemflow at {revision} = {commit[:12]} ({count} files differ)"


@contextlib.contextmanager
def backend_spec(kind: str) -> Iterator[dict[str, Any]]:
    """Start what ``kind`` needs (servers, a folder); yield what a subprocess needs to reach it."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="idemflow-bench-outbox-") as folder:
            yield {"kind": kind, "folder": folder}
    elif kind == "moto":
        from tests.servers import moto_server

        with moto_server() as dynamodb, moto_server() as sqs:  # SQS apart: moto serves one call at a time
            yield {"kind": kind, "dynamodb": dynamodb.endpoint, "sqs": sqs.endpoint, "region": sqs.region}
    elif kind == "azurite":
        from tests.servers import azurite_server

        with azurite_server() as azurite:
            yield {"kind": kind, "connection_string": azurite.connection_string}
    else:
        raise ValueError(f"unknown backend {kind!r}; one of {DEFAULT_KINDS}")


class Child:
    """One idemflow version's subprocess, asked one JSON command at a time."""

    def __init__(self, name: str, root: Path, spec: dict[str, Any]) -> None:
        self.name = name
        self._errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, str(root), str(ROOT), json.dumps(spec)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )

    def ask(self, **command: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.proc.wait(timeout=30)
            self._errors.seek(0)
            errors = self._errors.read()[-4000:].decode(errors="replace")
            raise RuntimeError(f"the {self.name} subprocess died ({self.proc.returncode}):\n{errors}")
        return json.loads(line)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "close"}) + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._errors.close()


@dataclass
class Variant:
    """What one variant measured on one backend, accumulated over rounds."""

    samples: list[float] = field(default_factory=list)
    """Median seconds per submit of each round, in round order."""
    latencies: list[float] = field(default_factory=list)
    client: dict[str, float] = field(default_factory=dict)
    worker: dict[str, float] = field(default_factory=dict)
    message_bytes: list[float] = field(default_factory=list)
    requests: int = 0
    relay: dict[str, Any] | None = None

    def add(self, answer: dict[str, Any]) -> None:
        latencies = [float(x) for x in answer["latencies"]]
        self.samples.append(statistics.median(latencies))
        self.latencies.extend(latencies)
        self.requests += len(latencies)
        for mine, theirs in ((self.client, answer["client"]), (self.worker, answer["worker"])):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0.0) + value
        self.message_bytes.append(float(answer["message_bytes"]))

    def per_request(self, part: str, key: str) -> float:
        counts = self.client if part == "client" else self.worker
        return counts.get(key, 0.0) / self.requests

    @property
    def path_calls(self) -> float:
        """Backend calls on the client's critical path per submit: store calls + the queue send."""
        store = self.per_request("client", "round_trips") - self.per_request("client", "cache_writes")
        return store + self.per_request("client", "sends")

    @property
    def off_path_calls(self) -> float:
        return self.per_request("client", "cache_writes")


def measure(
    kind: str, roots: dict[str, Path], rounds: int, per_round: int, warmup: int
) -> dict[str, Variant]:
    """Both variants (``roots``: where each one's idemflow is) on fresh tables of one backend,
    rounds interleaved."""
    results = {name: Variant() for name in VARIANTS}
    with backend_spec(kind) as spec:
        children: dict[str, Child] = {}
        try:
            names = list(VARIANTS)
            if kind != "sqlite":  # SQLite's cache writes are synchronous: settled already
                names.append(SETTLED)
                results[SETTLED] = Variant()
            for name, tag in zip(names, ("obb", "obc", "obs"), strict=False):
                # Each its own tables, growing alike (moto copies a table on every transaction).
                root = roots["baseline" if name == "baseline" else "candidate"]
                children[name] = Child(name, root, {**spec, "tag": tag})
            for child in children.values():  # untimed: files past their first WAL checkpoint, caches
                child.ask(op="warmup", n=warmup)
            for r in range(rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    answer = children[name].ask(op="round", n=per_round, settle=name == SETTLED)
                    results[name].add(answer)
            for name in VARIANTS:
                results[name].relay = children[name].ask(op="relay", n=RELAY_PASSES)
        finally:
            for child in children.values():
                child.close()
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _latency(variant: Variant) -> str:
    return f"{_ms(statistics.median(variant.latencies))} ({_ms(percentile(variant.latencies, 95))})"


def _n(value: float) -> str:
    return f"{value:.2f}"


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks outbox", description=__doc__)
    parser.add_argument("--stores", default="sqlite" if quick else ",".join(DEFAULT_KINDS))
    parser.add_argument(
        "--baseline", default=PREVIOUS_RELEASE, help="git revision measured as the previous release"
    )
    parser.add_argument("--candidate", default=None, help="git revision measured instead of the work tree")
    parser.add_argument("--rounds", type=int, default=4 if quick else 16)
    parser.add_argument("--per-round", type=int, default=None, help="submits per variant per round")
    parser.add_argument("--warmup", type=int, default=None, help="untimed submits per variant first")
    parser.add_argument("--out", type=Path, default=out, help="results folder")
    args = parser.parse_args(argv)
    out = args.out
    stores = [s for s in args.stores.split(",") if s]

    def per_round(kind: str) -> int:
        if args.per_round is not None:
            return int(args.per_round)
        return 10 if quick else (50 if kind == "sqlite" else 20)

    def warmup(kind: str) -> int:
        if args.warmup is not None:
            return int(args.warmup)
        return (20 if quick else 250) if kind == "sqlite" else (3 if quick else 20)

    with (
        revision_tree(args.baseline) as (baseline_root, commit),
        candidate_tree(args.candidate, commit) as (candidate_root, candidate),
    ):
        roots = {"baseline": baseline_root, "candidate": candidate_root}
        report = Report(
            "outbox",
            "Transactional outbox: submit against the previous release",
            {
                "baseline": f"{args.baseline} = {commit[:12]}",
                "candidate": candidate,
                "stores": stores,
                "rounds": args.rounds,
                "submits per variant per round": {kind: per_round(kind) for kind in stores},
                "untimed warm-up submits": {kind: warmup(kind) for kind in stores},
            },
            out,
        )
        print(f"  outbox: baseline {commit[:12]}, candidate {candidate}", flush=True)
        measured: dict[str, dict[str, Variant]] = {}
        for kind in stores:
            print(f"  outbox {kind}: {args.rounds} rounds of {per_round(kind)} submits", flush=True)
            measured[kind] = measure(kind, roots, args.rounds, per_round(kind), warmup(kind))
    _write(report, measured, commit, candidate, out)
    return report


def _write(
    report: Report, measured: dict[str, dict[str, Variant]], commit: str, candidate: str, out: Path
) -> None:
    report.add(
        f"*baseline* is idemflow at {commit[:12]} (`git archive`), *candidate* {candidate}.",
        "Each runs in its own process, on its own fresh tables of the same backend, rounds interleaved",
        "(the order rotates). Workload: `tests.async_workflows.survey` with a checkpoint after step 1, a",
        "new request id per submit; `submit` runs step 1 and sends the continuation; a worker finishes the",
        "request between rounds, untimed. A round's sample is the median of its submits; the ratio is",
        "candidate / baseline per round (median, IQR across rounds). Counts are per submit.",
        "",
        "## Latency per submit",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        base, cand = variants["baseline"], variants["candidate"]
        ratio = paired_ratio(kind, cand.samples, base.samples)
        settled = variants.get(SETTLED)
        rows.append(
            [
                LABELS[kind],
                _latency(base),
                _latency(cand),
                f"**{fmt_ratio(ratio)}**",
                "–" if settled is None else _latency(settled),
                "–" if settled is None else fmt_ratio(paired_ratio(kind, settled.samples, base.samples)),
            ]
        )
        report.headline(f"outbox.{kind}.candidate_over_baseline_latency", ratio, note="submit, 1 client")
        print(
            f"  outbox {kind}: baseline {_latency(base)} ms, candidate {_latency(cand)} ms, "
            f"ratio {fmt_ratio(ratio)}"
            + ("" if settled is None else f"; deletes awaited {_latency(settled)} ms"),
            flush=True,
        )
    report.table(
        [
            "backend",
            "baseline median ms (p95)",
            "candidate median ms (p95)",
            "candidate / baseline",
            f"{SETTLED} (untimed): median ms (p95)",
            "its ratio to baseline",
        ],
        rows,
    )
    report.add(
        f"*{SETTLED}*: the candidate again (its own process, tables and rounds), waiting (untimed) after",
        "each submit for its background deletion of the outbox entry, so that none overlaps the next",
        "submit (on moto the deletion and the next submit's transaction queue on the one request thread;",
        "in the process they share the GIL). Not measured on SQLite, whose deletion is synchronous.",
        "On moto the store's commit is mostly the emulator's price: its `TransactWriteItems` deep-copies",
        "the table of each item in the transaction, once per item, before applying it, so the candidate's",
        "extra item (the outbox entry) costs one more copy of the run-record table, which holds a row per",
        "request (now with its input).",
        "",
    )
    report.add(
        "Where a submit's time goes, mean ms per submit: the store's commits, the queue send and the",
        "`commit_cache` call (the outbox entry's deletion: the write itself on SQLite, handing it to the",
        "background thread on the others) as timed around the calls; the rest is the library and",
        "everything else in `submit`.",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name, v in variants.items():
            mean = statistics.fmean(v.latencies)
            commits = v.per_request("client", "commit_seconds")
            send = v.per_request("client", "send_seconds")
            cache = v.per_request("client", "cache_seconds")
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    _ms(mean),
                    _ms(commits),
                    _ms(send),
                    _ms(cache),
                    _ms(mean - commits - send - cache),
                ]
            )
    report.table(
        ["backend", "variant", "mean ms", "store commits", "queue send", "commit_cache call", "the rest"],
        rows,
    )
    report.add(
        "## Calls and bytes per submit",
        "",
        "*on path*: backend calls before `submit` returns — the store's round trips (including e.g. the",
        "Azure store's reads behind a commit) minus its cache writes, plus the queue send; *reads* and",
        "*commits* are the store API calls behind them. *off path*: `commit_cache` writes (the candidate's",
        "deletion of its outbox entry) — a background thread on DynamoDB and Azure; on SQLite written on the",
        "caller's thread without an fsync, so there its time is inside the latency above. Bytes are logical",
        "(partition + row key + encoded value per written row, `benchmarks/_counting.py`).",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name in VARIANTS:
            v = variants[name]
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    f"**{_n(v.path_calls)}**",
                    _n(v.per_request("client", "reads")),
                    _n(v.per_request("client", "commits")),
                    _n(v.per_request("client", "sends")),
                    _n(v.per_request("client", "rows")),
                    f"{v.per_request('client', 'bytes'):.0f}",
                    f"{statistics.median(v.message_bytes):.0f}",
                    f"**{_n(v.off_path_calls)}**",
                    f"{v.per_request('client', 'cache_bytes'):.0f}",
                ]
            )
        base, cand = variants["baseline"], variants["candidate"]
        key = f"outbox.{kind}"
        report.headline(
            f"{key}.calls_on_path",
            {"baseline": round(base.path_calls, 2), "candidate": round(cand.path_calls, 2)},
            note="store + queue calls before submit returns",
        )
        report.headline(
            f"{key}.calls_off_path",
            {"baseline": round(base.off_path_calls, 2), "candidate": round(cand.off_path_calls, 2)},
            note="commit_cache (outbox entry deletion)",
        )
        report.headline(
            f"{key}.message_bytes",
            {n: round(statistics.median(variants[n].message_bytes)) for n in VARIANTS},
            note="queue message body",
        )
    report.table(
        [
            "backend",
            "variant",
            "on path calls",
            "reads",
            "commits",
            "queue sends",
            "rows written",
            "bytes written",
            "message bytes",
            "off path calls",
            "off path bytes",
        ],
        rows,
    )
    report.add(
        "## What the worker does to finish a request, and the outbox relay",
        "",
        "Per request the worker finished (untimed, between rounds; its relay off, measured apart):",
        "backend calls of the store (round trips, cache writes included) and the store API calls",
        "behind them; queue calls (receive, delete) not counted. The relay: one pass over an empty",
        "outbox (the candidate's workers each run one every `relay_every` seconds, 10 by default).",
        "",
    )
    rows = []
    for kind, variants in measured.items():
        for name in VARIANTS:
            v = variants[name]
            relay = v.relay
            rows.append(
                [
                    LABELS[kind] if name == "baseline" else "",
                    name,
                    f"**{_n(v.per_request('worker', 'round_trips'))}**",
                    _n(v.per_request("worker", "reads")),
                    _n(v.per_request("worker", "commits")),
                    _n(v.per_request("worker", "cache_writes")),
                    f"{v.per_request('worker', 'bytes') + v.per_request('worker', 'cache_bytes'):.0f}",
                    "–" if relay is None else _n(float(relay["per_pass"]["scans"]) / RELAY_PASSES),
                    "–" if relay is None else _ms(float(relay["seconds"])),
                ]
            )
        report.headline(
            f"outbox.{kind}.worker_calls",
            {n: round(variants[n].per_request("worker", "round_trips"), 2) for n in VARIANTS},
            note="store calls per request finished",
        )
    report.table(
        [
            "backend",
            "variant",
            "worker store calls",
            "reads",
            "commits",
            "cache writes",
            "bytes written",
            "relay: partition queries per pass",
            "relay: ms per pass",
        ],
        rows,
    )
    from benchmarks._plot import panels_figure

    latency = {
        kind: {
            n: paired_ratio(n, v.samples, variants["baseline"].samples).median for n, v in variants.items()
        }
        for kind, variants in measured.items()
    }
    calls = {
        kind: {
            "baseline on path": variants["baseline"].path_calls,
            "candidate on path": variants["candidate"].path_calls,
            "candidate off path": variants["candidate"].off_path_calls,
        }
        for kind, variants in measured.items()
    }
    plot = panels_figure(
        out / "outbox.png",
        "submit with the transactional outbox (candidate) against the previous release (baseline)",
        [
            ("submit latency / baseline (median of rounds)", latency, False),
            ("backend calls per submit", calls, False),
        ],
    )
    report.add(f"![outbox]({plot.name})", "")
    report.write()


if __name__ == "__main__":
    main([a for a in sys.argv[1:] if a != "--quick"], quick="--quick" in sys.argv[1:])
