"""Old import paths of names that moved in 1.0: they still resolve, for one minor release, with a
:class:`DeprecationWarning` naming the new place.

A module that lost names answers their lookups (PEP 562 ``__getattr__``) from a table of
``{old name: "new.module"}`` or ``{old name: "new.module:new_name"}`` for a name that also
changed. The warning is attributed to the importing line, and its text starts with the old
path, so a test suite can turn exactly these warnings into errors
(``filterwarnings = ["error:idemflow\\..* moved:DeprecationWarning"]``).

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     found = resolve("idemflow.old", "submit", {"submit": "idemflow.client"})
>>> found.__module__, str(caught[0].message)
('idemflow.async_worklist._submission', 'idemflow.old.submit moved: import submit from idemflow.client')
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable, Mapping

Moves = Mapping[str, str]
"""``{old name: "new.module"}``, or ``"new.module:new_name"`` when the name changed too."""


def new_place(target: str, name: str) -> tuple[str, str]:
    """The module and name a move points to."""
    module, _, renamed = target.partition(":")
    return module, renamed or name


def resolve(owner: str, name: str, moves: Moves, *, depth: int = 0) -> object:
    """``name`` from where it moved, with a :class:`DeprecationWarning`; the body of a module's
    ``__getattr__`` (``depth``: calls between it and this one). :class:`AttributeError` for a name
    that never lived in ``owner``."""
    if name not in moves:
        raise AttributeError(f"module {owner!r} has no attribute {name!r}")
    module, renamed = new_place(moves[name], name)
    warnings.warn(
        f"{owner}.{name} moved: import {renamed} from {module}"
        + ("" if renamed == name else f" (renamed from {name})"),
        DeprecationWarning,
        stacklevel=3 + depth,  # the line that imported the old path
    )
    return getattr(importlib.import_module(module), renamed)


def forwarding(old: str, new: str) -> Callable[[str], object]:
    """The ``__getattr__`` of a renamed module ``old``: every name of module ``new``, each with
    the warning :func:`resolve` gives."""

    def __getattr__(name: str) -> object:
        if name.startswith("__") or not hasattr(importlib.import_module(new), name):
            # import machinery and tools probing dunders, or a name the new module lacks too
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return resolve(old, name, {name: new})

    return __getattr__


def alias(package: str, old: str, new: str) -> None:
    """Make ``package.old`` importable as the renamed module ``package.new``: no file, a module
    object in ``sys.modules`` whose names resolve with their warning (a ``.pyi`` stub at the old
    path keeps type checkers finding it), so the renamed file stays a plain rename in history."""
    name = f"{package}.{old}"
    if name in sys.modules:
        return
    module = types.ModuleType(name, f"Renamed: import from {package}.{new}.")
    module.__getattr__ = forwarding(name, f"{package}.{new}")  # type: ignore[method-assign]
    sys.modules[name] = module
    setattr(sys.modules[package], old, module)


__all__ = ["Moves", "alias", "forwarding", "new_place", "resolve"]
