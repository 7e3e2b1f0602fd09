"""Deprecated path (removed in 1.1): import from idemflow.stores.azure_tables_async."""

from idemflow.stores.azure_tables_async import *  # noqa: F403
