"""Benchmarks: paper-style evaluation, measured side by side, reported as ratios."""
