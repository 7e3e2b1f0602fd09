"""Old module paths that keep working for one minor release, with a :class:`DeprecationWarning`.

Modules named for their API flavour alone (``stores.aio``, ``*_aio``) were
renamed for what they hold. Each old path is no file but a module object its
package puts in ``sys.modules`` (:func:`alias`), whose ``__getattr__``
(PEP 562) forwards every name to the new module, warning: so
``from idemflow.stores.aio import to_async`` still works and says where the
name lives now, and the renamed files stay plain renames in the history.
A ``.pyi`` stub at each old path keeps type checkers finding it.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

REMOVED_IN = "1.1"


def moved(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that forwards every name to module ``new``, warning."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # import machinery and tools probing dunders: no warning
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(new), name)
        warnings.warn(
            f"{old} is deprecated and will be removed in {REMOVED_IN}: import {name} from {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__


def alias(package: str, old: str, new: str) -> None:
    """Make ``package.old`` importable as a deprecated path of module ``package.new``."""
    name = f"{package}.{old}"
    if name in sys.modules:
        return
    module = types.ModuleType(name, f"Deprecated path of {package}.{new} (removed in {REMOVED_IN}).")
    module.__getattr__ = moved(name, f"{package}.{new}")  # type: ignore[method-assign]
    sys.modules[name] = module
    setattr(sys.modules[package], old, module)


__all__ = ["REMOVED_IN", "alias", "moved"]
