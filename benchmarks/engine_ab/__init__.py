"""A/B of the engine's per-step cost: this work tree's idemflow against a git revision's, one run.

Run: ``python -m benchmarks.engine_ab [--baseline REV] [--rounds N]`` (writes
benchmarks/results/engine_ab.md). Each round runs one subprocess per version, the order
alternating (:mod:`benchmarks.engine_ab.child`: MemoryStore workflows of 1, 10 and 100 steps,
a 2-step workflow on SqliteStore); the page gives each version's median and the median of the
per-round ratios, so drift that hits a round hits both versions alike. The default baseline is
the commit before the engine was split into layers (issue #17).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common.stats import environment, paired_ratio, summarize, write
from benchmarks.outbox.trees import ROOT, candidate_tree, revision_tree

BEFORE_SPLIT = "4762c5c"
"""main before the engine clean-up of #17 split ``engine.py`` (939 lines) into layers."""
BOOT = (
    "import runpy, sys; sys.path[:0] = sys.argv[1:3]; "
    "runpy.run_module('benchmarks.engine_ab.child', run_name='__main__', alter_sys=True)"
)
"""The subprocess: ``python -c BOOT <idemflow root> <repository>``: that version's idemflow first."""


def _round(root: Path, quick: bool) -> dict[str, float]:
    env = {**os.environ, "IDEMFLOW_AB_DIVISOR": "20" if quick else "1"}
    done = subprocess.run(
        [sys.executable, "-c", BOOT, str(root), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if not answer["idemflow"].startswith(str(root)):  # the version asked for, not the installed one
        raise RuntimeError(f"the child imported {answer['idemflow']}, not the tree under {root}")
    metrics: dict[str, float] = answer["metrics"]
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", default=BEFORE_SPLIT, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", type=Path, default=None, help="folder for the page")
    parser.add_argument("--quick", action="store_true", help="one round of tiny runs (the suite's smoke)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 1
    samples: dict[str, dict[str, list[float]]] = {"baseline": {}, "candidate": {}}
    with (
        revision_tree(args.baseline) as (base_root, commit),
        candidate_tree(None, commit) as (cand_root, what),
    ):
        roots = {"baseline": base_root, "candidate": cand_root}
        for number in range(args.rounds):
            order = ["baseline", "candidate"] if number % 2 == 0 else ["candidate", "baseline"]
            for name in order:
                for metric, value in _round(roots[name], args.quick).items():
                    samples[name].setdefault(metric, []).append(value)
            print(f"round {number + 1}/{args.rounds} done", flush=True)
    lines = [
        "# Engine A/B: per-step cost, this tree against a revision",
        "",
        environment(),
        "",
        f"Baseline: idemflow at {args.baseline} = {commit[:12]}. Candidate: {what}.",
        f"{args.rounds} rounds, one subprocess per version per round, the order alternating.",
        "",
        "| metric | baseline median | candidate median | candidate / baseline (paired, IQR) |",
        "|---|---|---|---|",
    ]
    for metric, base in samples["baseline"].items():
        cand = samples["candidate"][metric]
        ratio = paired_ratio(metric, cand, base)
        lines.append(
            f"| {metric} | {summarize(metric, base).median:.2f} | {summarize(metric, cand).median:.2f} | "
            f"{ratio.median:.3f} ({ratio.q1:.3f}–{ratio.q3:.3f}) |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"wrote {write('engine_ab.md', text, args.out)}")
