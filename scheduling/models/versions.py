"""The cascade's generations as this platform provisions them (v1, v2, v3)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduling.config.conf import configured_version, setting_name
from topology import cascade


class TopologyVersion(models.Model):
    """One generation of the cascade as this platform provisions it (v1, v2, v3). Which one new
    endpoints use is the setting DELAY_DEFAULT_VERSION; how many shards it has, DELAY_SHARDS
    (``shards`` records what the last provisioning declared)."""

    class QueueKind(models.TextChoices):
        CLASSIC_LAZY = "classic-lazy", "classic, lazy"
        QUORUM = "quorum", "quorum, at-least-once dead-lettering"

    name = models.CharField(max_length=16, unique=True, choices=[(n, n) for n in cascade.VERSIONS])
    prefix = models.CharField(max_length=100, unique=True)
    levels = models.PositiveSmallIntegerField(
        default=cascade.DEFAULT_LEVELS, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    queue_kind = models.CharField(max_length=16, choices=QueueKind.choices)
    shards = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(cascade.MAX_SHARDS)],
        help_text=f"parallel cascades declared by the last provisioning ({setting_name('shards')} sets how many)",
    )
    provisioned_at = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    verify_problems = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        permissions = [("provision_topologyversion", "Can provision and verify cascades")]

    def __str__(self) -> str:
        return self.name

    @property
    def cascade(self) -> cascade.Version:
        """This version's cascade under its prefix and levels, with the configured shards."""
        return configured_version(self.name, prefix=self.prefix, levels=self.levels)

    @property
    def max_delay_ms(self) -> int:
        return self.cascade.max_delay_ms
