"""The ``cost`` page's figure: per backend, each variant's p50 beside what it is billed (request
units on DynamoDB, billable transactions on Azure, calls on the SQL stores).

Why apart: matplotlib's layout is no part of the numbers; the report only names the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol


class Row(Protocol):
    """What the figure reads of a row of the page (the report's rows have it)."""

    @property
    def backend(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def p50_ms(self) -> float: ...
    @property
    def wru(self) -> float: ...
    @property
    def rru(self) -> float: ...
    @property
    def calls_all(self) -> float: ...


def figure(path: Path, found: Sequence[Row], kinds: list[str], labels: dict[str, str]) -> Path:
    from benchmarks.common.plot import _pyplot, _save  # matplotlib: the bench extra

    plt = _pyplot()
    fig, axes = plt.subplots(len(kinds), 2, figsize=(13, 4.2 * len(kinds)), squeeze=False)
    for (latency, billed), kind in zip(axes, kinds, strict=True):
        mine = [row for row in found if row.backend == kind]
        names = [row.name for row in mine]
        latency.barh(names, [row.p50_ms for row in mine], color="tab:blue")
        latency.set_xlabel("p50 latency (ms)")
        if kind == "dynamodb-local":
            billed.barh(names, [row.wru for row in mine], color="tab:red", label="write request units")
            billed.barh(
                names,
                [row.rru for row in mine],
                left=[row.wru for row in mine],
                color="tab:orange",
                label="read request units",
            )
            billed.set_xlabel("request units per request")
            billed.legend(fontsize="small")
        else:
            billed.barh(names, [row.calls_all for row in mine], color="tab:green")
            billed.set_xlabel(
                "billable transactions per request" if kind == "azurite" else "calls per request"
            )
        for ax in (latency, billed):
            ax.set_title(labels[kind], fontsize="medium")
            ax.invert_yaxis()
            ax.grid(True, axis="x", alpha=0.3)
            ax.tick_params(axis="y", labelsize="small")
    return _save(plt, fig, path, "cost per request: latency, and what it is billed")
