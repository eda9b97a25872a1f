"""Scheduled messages: scheduling, cancelling and republishing them (services.py, bulk.py), the
message on the wire (messages/wire.py), the outbox's relay into the cascade, the rescue of overdue ones,
the unroutable queue's drain, the bulk statements (messages/queries.py) and their reads."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
