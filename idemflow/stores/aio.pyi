"""Deprecated path (removed in 1.1): import from idemflow.stores.async_adapters."""

from idemflow.stores.async_adapters import *  # noqa: F403
