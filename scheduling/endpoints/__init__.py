"""Endpoints: where a message is delivered (a queue, a Celery task, a webhook), their writes,
their reads and their webhook secrets."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
