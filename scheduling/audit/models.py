"""The audit log: one row per change made through the API, the admin or a command, written in
the transaction of the change. Append-only: a trigger (migration 0019) refuses every UPDATE, and
every DELETE but the prune's. Who and which team are copied as values, not foreign keys: the log
outlives users, keys and teams, and a foreign key's SET NULL would be an update."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    class Source(models.TextChoices):
        API = "api", "API"
        ADMIN = "admin", "admin"
        COMMAND = "command", "command"

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

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["team_id", "at", "id"], name="audit_team_at"),
            models.Index(fields=["at", "id"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_repr}"
