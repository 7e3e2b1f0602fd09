"""Deprecated path (removed in 1.1): import from idemflow.stores.dynamodb_async."""

from idemflow.stores.dynamodb_async import *  # noqa: F403
