"""Deprecated path (removed in 1.1): import from idemflow.async_worklist.queues.azure_queue_async."""

from idemflow.async_worklist.queues.azure_queue_async import *  # noqa: F403
