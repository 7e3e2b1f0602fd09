"""Deprecated path (removed in 1.1): import from idemflow.async_worklist.queues.async_adapters."""

from idemflow.async_worklist.queues.async_adapters import *  # noqa: F403
