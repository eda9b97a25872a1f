"""Autovacuum for the messages table, tuned for its churn: every message is inserted, updated
twice (pending -> published -> delivered, never in place: status is indexed) and, after its
retention, deleted: three dead row versions per message. PostgreSQL's defaults vacuum a table once
a fifth of it is dead; at 1,000 messages/s with 7 days' retention (~600 M rows) that is 120 M dead
versions, tens of GB, before a vacuum even starts. 1 % (or 10,000 rows on a small table) keeps the
dead share near 1 % and the size flat; inserts trigger a vacuum as often, so the visibility map
stays current for the index-only counts (pending, published, failed). Five times the default cost
limit lets each vacuum of this table keep up with that churn (bench/studies/history_layout.py, part C);
docs/operations/performance.md ("History") has the arithmetic and the measurements."""

from django.db import migrations

TABLE = "scheduling_scheduledmessage"
SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    "autovacuum_vacuum_insert_threshold": "10000",
    "autovacuum_analyze_scale_factor": "0.01",
    "autovacuum_analyze_threshold": "10000",
    "autovacuum_vacuum_cost_limit": "1000",
}


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0014_list_indexes_and_delivery_minutes")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET ({', '.join(f'{k} = {v}' for k, v in SETTINGS.items())})",
            f"ALTER TABLE {TABLE} RESET ({', '.join(SETTINGS)})",
        ),
    ]
