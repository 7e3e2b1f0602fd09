"""The rounds of ``outbox``: each idemflow version in a subprocess of its own
(:mod:`benchmarks.outbox.child`) on fresh tables of one backend, asked round by round, the order
rotating, and what each measured, accumulated.

Why apart: driving the subprocesses is the measurement; the page and the command line are not.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.common.backends import DEFAULT_KINDS

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("baseline", "candidate")
SETTLED = "candidate, deletes awaited"
"""The candidate again, each submit's background write awaited (untimed) before the next submit."""
RELAY_PASSES = 5
BOOT = (
    "import runpy, sys; sys.path[:0] = sys.argv[1:3]; "
    "runpy.run_module('benchmarks.outbox.child', run_name='__main__', alter_sys=True)"
)
"""The subprocess: ``python -c BOOT <idemflow root> <repository> <spec>``; the root goes first on
sys.path (before the repository, the working directory and the editable install's finder)."""


@contextlib.contextmanager
def backend_spec(kind: str) -> Iterator[dict[str, Any]]:
    """Start what ``kind`` needs (servers, a folder); yield what a subprocess needs to reach it."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="idemflow-bench-outbox-") as folder:
            yield {"kind": kind, "folder": folder}
    elif kind == "moto":
        from idemflow.testing.servers import moto_server

        with moto_server() as dynamodb, moto_server() as sqs:  # SQS apart: moto serves one call at a time
            yield {"kind": kind, "dynamodb": dynamodb.endpoint, "sqs": sqs.endpoint, "region": sqs.region}
    elif kind == "azurite":
        from idemflow.testing.servers import azurite_server

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
