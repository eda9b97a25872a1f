"""The database layer below the models: SQL helpers that name no model (sql.py) and the counts
that read PostgreSQL's own statistics (counts.py)."""
