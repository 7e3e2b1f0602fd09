"""The step engine: it interprets one request's workflow, replaying memos and executing
the first step not committed, for both APIs (its drivers answer store requests only)."""
