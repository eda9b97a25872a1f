"""Recurring schedules: their rules (rules.py, pure), the upsert, pause, delete and the
materialiser that makes their runs ahead of time (services.py), and their reads."""
