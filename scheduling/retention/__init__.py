"""Retention: the prune and its Parquet archive (the columns and the writer the accuracy
report's export shares), the audit log's archive, and the reads that size them."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
