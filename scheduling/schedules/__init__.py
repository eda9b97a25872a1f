"""Recurring schedules: their rules (rules.py, pure). The materialiser and the upsert are in
services/schedules.py."""
