"""Examples in the documentation run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "deploying.md",
    ROOT / "docs" / "asyncio.md",
    ROOT / "docs" / "contention.md",
    ROOT / "docs" / "migrating.md",
    ROOT / "docs" / "coordination.md",
    ROOT / "docs" / "events-and-streams.md",
    ROOT / "docs" / "concurrency.md",
    ROOT / "docs" / "outside-calls.md",
    ROOT / "docs" / "errors.md",
    ROOT / "docs" / "serverless.md",
    ROOT / "docs" / "scheduling.md",
    ROOT / "docs" / "schedules.md",
    ROOT / "docs" / "continue-as-new.md",
    ROOT / "docs" / "flow-control.md",
    ROOT / "docs" / "scaling.md",
    *sorted((ROOT / "samples").glob("*/README.md")),
]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize(
    "path", [p for p in DOCS if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), {"__name__": "docs_example"})


def test_every_test_linked_from_the_guarantees_exists() -> None:
    """docs/guarantees.md is only as good as its links: each names a test that exists."""
    text = (ROOT / "docs" / "guarantees.md").read_text()
    missing: list[str] = []
    linked = 0
    current: Path | None = None  # a bare `::name` continues the file named before it
    for line in text.splitlines():
        for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", line):
            if path:
                current = ROOT / path
            assert current is not None, f"{name} has no file before it in: {line.strip()}"
            linked += 1
            if not re.search(rf"^(async )?def {name}\(", current.read_text(), flags=re.MULTILINE):
                missing.append(f"{current.relative_to(ROOT)}::{name}")
    assert linked > 40
    assert missing == []
