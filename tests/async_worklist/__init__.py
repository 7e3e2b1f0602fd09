"""The asynchronous worklist: queues, continuations, workers and the pool."""
