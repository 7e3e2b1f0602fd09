"""Old module paths that keep working for one minor release, with a :class:`DeprecationWarning`.

Modules named for their API flavour alone (``stores.aio``, ``*_aio``) were
renamed for what they hold; each old path is a module whose ``__getattr__``
(PEP 562) is :func:`moved`, so ``from idemflow.stores.aio import to_async``
still works and says where the name lives now.
"""

from __future__ import annotations

import importlib
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


__all__ = ["REMOVED_IN", "moved"]
