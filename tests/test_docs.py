"""Examples in the documentation run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "samples").glob("*/README.md"))]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize(
    "path", [p for p in DOCS if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), {"__name__": "docs_example"})
