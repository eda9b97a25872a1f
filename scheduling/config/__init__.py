"""Settings, declared once: the parsers, the specs (one per environment variable), the pages
written from them, conf() (the typed object code reads) and the system checks."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
