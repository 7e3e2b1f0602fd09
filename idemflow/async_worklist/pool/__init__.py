"""The worker pool: processes that follow the backlog between a minimum and a maximum."""
