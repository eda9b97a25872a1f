"""Messages as Parquet rows: one schema and one writer for the archive (finished messages past
their retention, DELAY_ARCHIVE_DIR) and for the accuracy report's export of live rows, so the
report reads both the same way. See services/retention.py for the prune that fills the archive."""
