"""MkDocs hook: the home page is README.md, so README stays the one source.

``docs/index.md`` is a placeholder; its Markdown is replaced here by README.md,
whose links such as ``docs/deploying.md`` are written relative to the
repository root and become relative to docs/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_DOCS_LINK = re.compile(r"\]\(docs/")


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    readme = Path(config.config_file_path).parent / "README.md"
    return _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
