"""docs/architecture.md draws the layers the import contract enforces: the two are one list, and
every module of the package root is in it, so a new module cannot land outside the layers."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import idemflow

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(idemflow.__file__).parent
CONTRACT = "Layers import only downwards"


def contract_layers() -> list[set[str]]:
    """The layers of pyproject's contract, top first, as names below ``idemflow.``."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [found for found in settings["contracts"] if found["name"] == CONTRACT]
    assert contract["type"] == "layers"
    return [
        {name.strip().removeprefix("idemflow.") for name in re.split(r"[:|]", layer)}
        for layer in contract["layers"]
    ]


def drawn_layers() -> list[set[str]]:
    """The layers of docs/architecture.md's drawing, top first: ``name   module · module``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The layers, as imports draw them", 1)[1]
    drawing = section.split("```text\n", 1)[1].split("```", 1)[0]
    layers = []
    for line in drawing.splitlines():
        _, modules = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        layers.append({module.strip() for module in modules.split("·")})
    return layers


def root_modules() -> set[str]:
    """The modules and packages of the package root, bar ``__init__``."""
    found = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    return found | {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def test_the_drawing_names_the_contracts_layers_in_its_order() -> None:
    assert drawn_layers() == contract_layers()


def test_every_module_of_the_package_root_is_in_one_layer() -> None:
    layers = contract_layers()
    placed = [name for layer in layers for name in layer]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    assert root_modules() == set(placed)


def test_the_drawing_is_read_as_written() -> None:
    """The parser above reads what the page shows: its first and last layers."""
    layers = drawn_layers()
    assert "cli" in layers[0]
    assert {"core", "errors"} <= layers[-1]


def function_level_imports() -> list[tuple[str, int, str]]:
    """Every import statement inside a function of the package: file, line, the line's text."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        found.append((str(path.relative_to(ROOT)), inner.lineno, lines[inner.end_lineno - 1]))
    return found


def test_an_import_inside_a_function_is_one_of_an_optional_extra_and_names_it() -> None:
    """Hidden imports hide cycles: a module imports at its top, unless what it imports needs a
    pip extra the core does not install, and then the line says which."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    unnamed = [
        f"{path}:{line}"
        for path, line, text in function_level_imports()
        if (named := re.search(r"# the \[([\w-]+)\] extra", text)) is None or named[1] not in extras
    ]
    assert unnamed == []
    assert function_level_imports(), "the walk finds the imports the extras need"


def test_the_version_is_stated_once_and_is_the_newest_golden_release() -> None:
    """pyproject.toml's version is the one the golden rows and the record format name."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = {path.stem for path in (ROOT / "tests" / "golden").rglob("*.json")}
    newest = max(releases, key=lambda release: tuple(int(part) for part in release.split(".")))
    assert version == newest
    history = (PACKAGE / "core" / "row_format.py").read_text()
    assert f"({version})" in history, "the row format names the release"
