"""Griffe extension: render idemflow's docstrings, written for pydoc and doctest, as Markdown.

The library's docstrings use reStructuredText roles (``:class:`Store```) and
bare doctest blocks (``>>> ...``) outside any "Examples:" section. As
Markdown a role is noise and a doctest's output line such as ``['done']`` reads
as a link reference, so before rendering:

- each run of lines starting at ``>>>`` (through its ``...`` continuations and
  output, up to a blank line) becomes a fenced ``pycon`` code block, without
  its ``# doctest:`` flags;
- ``:role:`~pkg.mod.Name``` becomes a link to ``pkg.mod.Name`` shown as
  ``Name`` (a plain ``:role:`Name``` resolves in the object's scope); a target
  the site does not render, or a builtin, shows as plain code.

Only the rendered copy changes; the source docstrings, run by doctest, stay as written.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_DOCTEST_FLAGS = re.compile(r"\s*# doctest:.*$")
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`(~?)([\w.]+)(\(\))?`")


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    short, target, call = match.group(1), match.group(2), match.group(3) or ""
    shown = f"`{target.rsplit('.', 1)[-1] if short else target}{call}`"
    try:
        path = obj.resolve(target) if "." not in target else target
    except griffe.NameResolutionError:
        return shown  # a builtin such as TimeoutError: no page to link to
    # Optional: a target the site does not render (a private module) shows as plain code.
    return f'<autoref identifier="{path}" optional>{shown}</autoref>'


def _fence_doctests(text: str) -> str:
    out: list[str] = []
    block: list[str] = []
    for line in text.splitlines():
        if block and not line.strip():
            out.extend(["```pycon", *block, "```", ""])
            block = []
            continue
        if block or line.lstrip().startswith(">>>"):
            block.append(_DOCTEST_FLAGS.sub("", line))
            continue
        out.append(line)
    if block:
        out.extend(["```pycon", *block, "```"])
    return "\n".join(out)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        text = _fence_doctests(obj.docstring.value)
        obj.docstring.value = _ROLE.sub(lambda match: _role(obj, match), text)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]


class MarkdownDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        _rewrite(pkg)
