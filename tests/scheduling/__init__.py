"""Schedules: their definition and checks, their ticks (cron, daylight saving), the scheduler loops."""
