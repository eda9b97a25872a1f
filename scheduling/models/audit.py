"""The audit log: one row per change made through the API, the admin or a command, written in
the transaction of the change. Append-only: a trigger (migration 0019) refuses every UPDATE, and
every DELETE but the prune's. Who and which team are copied as values, not foreign keys: the log
outlives users, keys and teams, and a foreign key's SET NULL would be an update.

Rows older than DELAY_AUDIT_RETENTION go to the archive (AuditArchiveFile), pruned like messages:
retention/services.py and archives.py."""

from __future__ import annotations

from django.db import connection, models
from django.utils import timezone

from scheduling.db.sql import lock_into_batch
from scheduling.models.listing import ParquetFileListing

# The batch the prune has locked, kept server-side for its transaction (as queries.PRUNE_BATCH is
# for messages): the archive's COPY and the DELETE join it.
AUDIT_PRUNE_BATCH = "dp_audit_prune_batch"


class AuditEventQuerySet(models.QuerySet):
    def lock_prune_batch(self, candidates: models.QuerySet, *, limit: int) -> tuple[int, tuple | None]:
        """Lock up to ``limit`` of ``candidates`` (in at, id order; rows another transaction holds
        are skipped) into this transaction's batch table; returns how many and the (at, id) of
        the last. Inside a transaction only."""
        return lock_into_batch(candidates, table=AUDIT_PRUNE_BATCH, order_by="at", id_type="bigint", limit=limit)

    def delete_prune_batch(self) -> int:
        """Delete the rows of this transaction's batch table; returns how many went. The trigger
        lets this one statement through: ``dp.audit_prune`` is on for it and off again after it
        (SET LOCAL would last to the end of an enclosing transaction)."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('dp.audit_prune', 'on', true)")
            cursor.execute(f"DELETE FROM {self.model._meta.db_table} a USING {AUDIT_PRUNE_BATCH} b "
                           "WHERE a.id = b.id")
            deleted = cursor.rowcount
            cursor.execute("SELECT set_config('dp.audit_prune', 'off', true)")
            return deleted


class AuditEvent(models.Model):
    class Source(models.TextChoices):
        API = "api", "API"
        ADMIN = "admin", "admin"
        COMMAND = "command", "command"
        PLATFORM = "platform", "the platform"  # its own decisions (an endpoint disabled for failing)

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=16, choices=Source.choices)
    actor = models.CharField(max_length=200, help_text="the user, the key (key dpk_…) or the command")
    user_id = models.BigIntegerField(null=True, blank=True, help_text="the acting user's id, if a person")
    key_prefix = models.CharField(max_length=16, blank=True, help_text="the API key used, if any")
    team_id = models.BigIntegerField(null=True, blank=True)
    team_name = models.CharField(max_length=40, blank=True)
    action = models.CharField(max_length=64, help_text="entity.verb, e.g. endpoint.rotate_secret")
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=100, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True, help_text="the values before (secrets redacted)")
    after = models.JSONField(null=True, blank=True, help_text="the values after (secrets redacted)")
    extra = models.JSONField(null=True, blank=True, help_text="a bulk action's filter and count, ...")
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)
    request_id = models.CharField(max_length=64, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["team_id", "at", "id"], name="audit_team_at"),
            models.Index(fields=["at", "id"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_repr}"


class AuditArchiveFile(ParquetFileListing):
    """One Parquet file of the audit log's archive (``_audit/`` in DELAY_ARCHIVE_DIR), listed in
    the transaction that deleted its rows, as ArchiveFile is for messages; a table of its own so
    that nothing reading the messages' list (the accuracy report) ever reads an audit file."""

    day = models.DateField(db_index=True, help_text="the date (UTC) its changes were made on")

    class Meta(ParquetFileListing.Meta):
        pass
