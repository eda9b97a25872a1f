"""System checks on the database the platform runs on (``migrate`` runs them)."""

from django.core.checks import Tags, Warning, register
from django.db import DatabaseError


@register(Tags.database)
def autovacuum_on(app_configs=None, databases=None, **kwargs):
    """The messages table leaves three dead row versions per message; without autovacuum only
    the hourly prune's own VACUUM reclaims them, so the table holds an hour of dead rows more."""
    if not databases or "default" not in databases:
        return []
    from scheduling.retention.selectors import message_table_is_autovacuumed

    try:
        if message_table_is_autovacuumed():
            return []
    except DatabaseError:  # not migrated yet, or the server is away: other checks say so
        return []
    return [Warning(
        "PostgreSQL's autovacuum is off for the messages table",
        hint="Turn it on (autovacuum = on, PostgreSQL's default): until then the prune vacuums the table after "
             "each run, and the dead rows of an hour of updates wait for it.",
        id="scheduling.W001",
    )]
