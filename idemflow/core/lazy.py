"""Optional classes imported on first use, so ``import idemflow`` needs no cloud SDK.

The cloud stores and queues need the ``aws`` or ``azure`` extra. A package
lists them as ``{name: (module, extra)}`` and answers attribute lookups
(PEP 562) with :func:`load_optional`; using one without its extra installed
raises a :class:`~idemflow.errors.ConfigurationError` saying what to install.

>>> load_optional("idemflow.stores", "MemoryStore", {"MemoryStore": ("idemflow.stores.memory", "none")})
<class 'idemflow.stores.memory.MemoryStore'>
>>> load_optional("idemflow.stores", "Nothing", {})
Traceback (most recent call last):
...
AttributeError: module 'idemflow.stores' has no attribute 'Nothing'
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from idemflow.errors import ConfigurationError

OptionalClasses = Mapping[str, tuple[str, str]]
"""``{attribute: (module that defines it, extra that installs its SDK)}``."""


def load_optional(owner: str, name: str, optional: OptionalClasses) -> Any:
    """``name`` from its module as listed in ``optional``; the body of a module ``__getattr__``.

    Raises :class:`AttributeError` for names not listed (as a module would)
    and :class:`~idemflow.errors.ConfigurationError` naming the extra when its
    SDK is missing.
    """
    if name not in optional:
        raise AttributeError(f"module {owner!r} has no attribute {name!r}")
    module_name, extra = optional[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"{name} needs the '{extra}' extra: pip install 'idemflow[{extra}]' ({exc})"
        ) from exc
    return getattr(module, name)


__all__ = ["OptionalClasses", "load_optional"]
