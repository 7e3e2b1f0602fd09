"""A/B of the engine's per-request cost in instructions, not seconds: ``python -m
benchmarks.engine_ab.instructions [--baseline REV] [--requests N]`` (writes
benchmarks/results/engine_ab_instructions.md).

Why instructions: callgrind counts what the interpreter executes, the same for the same code and
inputs whatever else the machine runs, so the comparison holds on a loaded machine where
:mod:`benchmarks.engine_ab`'s timings swing by half. Each shape
(:mod:`benchmarks.engine_ab.counted`) runs twice per version, with 0 and with N requests after a
warm-up one: the difference over N is a request's instructions, start-up and imports cancelled
out. What it cannot see: time spent waiting (an fsync, a lock), and the cost of an instruction
(a cache miss counts as one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.stats import environment, write
from benchmarks.engine_ab.counted import SHAPES
from benchmarks.outbox.trees import ROOT, candidate_tree, revision_tree

BOOT = (
    "import runpy, sys; sys.path[:0] = sys.argv[1:3]; sys.argv[1:3] = []; "
    "runpy.run_module('benchmarks.engine_ab.counted', run_name='__main__', alter_sys=True)"
)
"""The subprocess: ``python -c BOOT <idemflow root> <repository> SHAPE COUNT``."""
COUNTS = {"memory-1": 200, "memory-10": 60, "memory-replay-10": 60, "sqlite-2": 100, "sqlite-duplicate": 100}
"""Requests per shape: a few seconds each under callgrind."""


def instructions(root: Path, shape: str, count: int) -> int:
    """Instructions callgrind counted for a run of ``count`` requests of ``shape`` in ``root``'s
    idemflow (a warm-up request included)."""
    with tempfile.TemporaryDirectory(prefix="idemflow-callgrind-") as folder:
        out = Path(folder) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", BOOT]
        subprocess.run(
            [*command, str(root), str(ROOT), shape, str(count)],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"callgrind wrote no total for {shape}")
    return int(found[1])


def per_request(root: Path, shape: str, count: int) -> float:
    return (instructions(root, shape, count) - instructions(root, shape, 0)) / count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    parser.add_argument("--out", type=Path, default=None, help="folder for the page")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=SHAPES, help="default: all")
    args = parser.parse_args(argv)
    rows = []
    with (
        revision_tree(args.baseline) as (base_root, commit),
        candidate_tree(None, commit) as (cand_root, what),
    ):
        for shape in args.shapes:
            count = max(1, round(COUNTS[shape] * args.scale))
            base, cand = per_request(base_root, shape, count), per_request(cand_root, shape, count)
            rows.append(f"| {shape} | {count} | {base / 1e3:.1f} | {cand / 1e3:.1f} | {cand / base:.3f} |")
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Engine A/B in instructions: per request, this tree against a revision",
            "",
            environment(),
            "",
            f"Baseline: idemflow at {args.baseline} = {commit[:12]}. Candidate: {what}.",
            "Counted by callgrind (the same for the same code whatever the machine's load); each "
            "figure is (a run of N requests - a run of 0) / N, thousands of instructions.",
            "",
            "| shape | N | baseline, k instr/request | candidate, k instr/request | candidate / baseline |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(f"wrote {write('engine_ab_instructions.md', text + chr(10), args.out)}")


if __name__ == "__main__":
    main()
