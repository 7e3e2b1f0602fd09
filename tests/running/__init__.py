"""Running in the caller's process: run/arun, @idempotent handlers, the answer cache."""
