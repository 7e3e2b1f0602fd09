"""Asynchronous worklist: checkpoints, queues and background workers (DESIGN.md section 5)."""
