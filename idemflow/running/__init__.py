"""Running a workflow in the caller's process: ``run``/``arun``, ``@idempotent`` handlers,
the answer cache and coordination of children and messages."""
