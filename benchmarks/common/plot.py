"""PNG figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKERS = {"baseline": "s", "sync": "o", "async": "^"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def users_figure(
    path: Path, title: str, data: dict[str, dict[str, tuple[list[int], list[float], list[float]]]]
) -> Path:
    """One row per workload: throughput and p95 latency against users, a line per variant.

    ``data[workload][variant] = (users, throughput, p95 ms)``.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(len(data), 2, figsize=(10, 3.6 * len(data)), squeeze=False)
    for row, (workload, variants) in enumerate(data.items()):
        tp_ax, lat_ax = axes[row]
        for variant, (users, throughput, p95) in variants.items():
            marker = MARKERS.get(variant, "o")
            tp_ax.plot(users, throughput, marker=marker, label=variant)
            lat_ax.plot(users, p95, marker=marker, label=variant)
        ticks = sorted({u for users, _tp, _p95 in variants.values() for u in users})
        for ax, what in ((tp_ax, "completed requests/s"), (lat_ax, "p95 client latency (ms)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel("concurrent users")
            ax.set_ylabel(what)
            ax.set_title(f"{workload}: {what}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        lat_ax.set_yscale("log")
    return _save(plt, fig, path, title)


def lines_figure(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[list[float], list[float]]],
    *,
    logx: bool = True,
    logy: bool = False,
) -> Path:
    """A simple line plot, one line per series ``name -> (x, y)``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (x, y) in series.items():
        ax.plot(x, y, marker="o", label=name)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def panels_lines_figure(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    panels: dict[str, dict[str, tuple[list[float], list[float]]]],
    *,
    logx: bool = True,
    logy: bool = False,
    style: Callable[[str], dict[str, Any]] | None = None,
) -> Path:
    """Line plots side by side, one panel per ``panels`` key, one line per series ``name -> (x, y)``;
    ``style(name)`` gives a series' matplotlib keywords (colour, line style, marker)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (panel, series) in zip(axes[0], panels.items(), strict=True):
        for name, (x, y) in series.items():
            ax.plot(x, y, label=name, **(style(name) if style else {"marker": "o"}))
        ticks = sorted({value for x, _y in series.values() for value in x})
        if logx:
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel, fontsize="medium")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return _save(plt, fig, path, title)


def bars_figure(path: Path, title: str, ylabel: str, bars: dict[str, dict[str, float]]) -> Path:
    """Grouped bars: ``bars[group][variant] = value``."""
    plt = _pyplot()
    groups = list(bars)
    variants = list(dict.fromkeys(v for group in bars.values() for v in group))
    width = 0.8 / max(len(variants), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) + 2), 4))
    for n, variant in enumerate(variants):
        xs = [g + n * width for g in range(len(groups))]
        ax.bar(xs, [bars[group].get(variant, 0.0) for group in groups], width, label=variant)
    ax.set_xticks([g + width * (len(variants) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def panels_figure(
    path: Path, title: str, panels: list[tuple[str, dict[str, dict[str, float]], bool]]
) -> Path:
    """Grouped bars in panels side by side: ``(ylabel, bars[group][variant], log y)`` each."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (ylabel, bars, logy) in zip(axes[0], panels, strict=True):
        groups = list(bars)
        variants = list(dict.fromkeys(v for group in bars.values() for v in group))
        width = 0.8 / max(len(variants), 1)
        for n, variant in enumerate(variants):
            xs = [g + n * width for g in range(len(groups))]
            ax.bar(xs, [bars[group].get(variant, 0.0) for group in groups], width, label=variant)
        ax.set_xticks([g + width * (len(variants) - 1) / 2 for g in range(len(groups))])
        ax.set_xticklabels(groups)
        if logy:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="small")
    return _save(plt, fig, path, title)


def _save(plt: Any, fig: Any, path: Path, title: str) -> Path:
    """Title, lay out, write ``path`` (its folder created) and free the figure."""
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
