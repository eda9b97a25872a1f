"""Recurring schedules: the upsert, pause, delete and the materialiser that makes their runs
ahead of time (services.py), and their reads. Their rules are pure (core/schedule_rules.py)."""
