"""Scheduled messages: scheduling, cancelling and republishing them (services.py, bulk.py), the
message on the wire (wire.py, structured.py), the outbox's relay into the cascade, the rescue of
overdue ones, the unroutable queue's drain, ordering keys' turns (ordering.py), debounce, expiry,
the notifications they write (notification_outbox.py, notifying.py) and their reads."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
