"""Checkpoint message size against the number of steps done before the checkpoint.

A continuation is a pointer: workflow name, version, request id and, for
every step done before the checkpoint, its table, partition and identity (the
journal a resume checks its code against); signed, it adds an HMAC. Inputs
and step values stay in the store, so they do not count. The size decides
how many journaled steps fit under a queue's body limit (SQS 255 KiB, Azure
63 KiB as idemflow counts them); past that ``submit`` sends the bare pointer.
Measured exactly: ``submit`` on ``MemoryStore`` + ``MemoryQueue``, then the
body received from the queue, in UTF-8 bytes.

Run: ``python -m benchmarks messages [--quick]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.report import Report
from benchmarks.common.stats import RESULTS
from idemflow import Idem, Tx, Workflow, atomic, checkpoint, workflow
from idemflow.async_worklist.queues.base import DEFAULT_MAX_BODY_BYTES
from idemflow.client import submit
from idemflow.stores import MemoryStore
from idemflow.worker import MemoryQueue

STEPS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
LIMITS = {"SQS": 255 * 1024, "Azure Queue": 63 * 1024}
PARTITIONS: dict[str, Callable[[int], str]] = {
    "2-char partitions": lambda i: f"p{i % 4}",
    "36-char partitions (UUIDs)": lambda i: f"{i:036d}",
}


def _body(i: int) -> Callable[[Tx], Any]:
    def record(tx: Tx) -> Any:
        tx.put(f"k{i}", i)
        return f"{i:0100d}"  # a 100-char result: stays in the store

    return record


def recorded_workflow(n: int, shape: str) -> Workflow[[dict[str, Any]], None]:
    partition = PARTITIONS[shape]

    @workflow("recorded")
    def flow(req: dict[str, Any]) -> Generator[Idem[Any], Any, None]:
        for i in range(n):
            yield atomic("items", partition(i), _body(i))
        yield checkpoint()
        yield atomic("items", "last", _body(n))

    return flow


def message_bytes(n: int, shape: str, key: bytes | None) -> int:
    store, queue = MemoryStore(), MemoryQueue(max_body_bytes=max(DEFAULT_MAX_BODY_BYTES, 1 << 24))
    flow = recorded_workflow(n, shape)
    submit(
        flow({"survey": "s0", "respondent": "p1"}),
        request_id="request-0001",
        store=store,
        queue=queue,
        signing_key=key,
    )
    (message,) = queue.receive(max_messages=1)
    return len(message.body.encode("utf-8"))


def main(argv: Sequence[str] | None = None, *, out: Path = RESULTS, quick: bool = False) -> Report:
    parser = argparse.ArgumentParser(prog="python -m benchmarks messages", description=__doc__)
    parser.parse_args(argv)
    steps = tuple(n for n in STEPS if n <= 100) if quick else STEPS
    report = Report("messages", "Checkpoint message size against recorded steps", {"steps": list(steps)}, out)
    sizes: dict[str, list[int]] = {}
    for shape in PARTITIONS:
        for signed in (False, True):
            label = f"{shape}, {'signed' if signed else 'unsigned'}"
            sizes[label] = [message_bytes(n, shape, b"k" * 32 if signed else None) for n in steps]
    report.add(
        'Body bytes of the continuation message; each step is `atomic("items", partition, body)` '
        "returning a 100-char string (values stay in the store); "
        'input `{"survey": "s0", "respondent": "p1"}`.',
        "",
    )
    report.table(
        ["recorded steps", *sizes],
        [[str(n), *(str(v[k]) for v in sizes.values())] for k, n in enumerate(steps)],
    )
    rows = []
    for label, values in sizes.items():
        per_step = (values[-1] - values[0]) / (steps[-1] - steps[0])
        fits = {
            name: int((limit - values[0]) // per_step) if per_step else -1 for name, limit in LIMITS.items()
        }
        rows.append([label, str(values[0]), f"{per_step:.1f}", *(str(v) for v in fits.values())])
        report.headline(f"messages.bytes_per_step.{label}", per_step, note="bytes per recorded step")
    report.add(
        "Fixed part, marginal bytes per recorded step, and how many recorded steps fit a queue's limit:", ""
    )
    report.table(["shape", "0 steps (bytes)", "bytes/step", *(f"steps fitting {n}" for n in LIMITS)], rows)
    from benchmarks.common.plot import lines_figure

    plot = lines_figure(
        out / "messages.png",
        "Continuation message size",
        "steps recorded before the checkpoint",
        "message body (bytes)",
        {
            label: ([max(n, 0.5) for n in steps], [float(v) for v in values])
            for label, values in sizes.items()
        },
        logy=True,
    )
    report.add(
        f"![messages]({plot.name})",
        "",
        "(0 steps is drawn at x = 0.5 on the log axis.)",
        "",
    )
    report.write()
    return report
