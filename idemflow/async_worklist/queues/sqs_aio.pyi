"""Deprecated path (removed in 1.1): import from idemflow.async_worklist.queues.sqs_async."""

from idemflow.async_worklist.queues.sqs_async import *  # noqa: F403
