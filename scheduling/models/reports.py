"""The figures kept about delivery: the per-minute lateness, the accuracy reports, the archive's files."""

from __future__ import annotations

from django.db import models

from scheduling.models.listing import ParquetFileListing
from scheduling.models.teams import Team


class DeliveryMinute(models.Model):
    """Deliveries of one minute (by delivered_at) in one lateness bucket (core/lateness_buckets.py),
    added by the delivery path in the transaction that records them: the dashboard reads a day
    of these rows instead of a day of messages. ``shard`` spreads concurrent writers (workers)
    over rows, so that one batch does not wait for another's commit."""

    minute = models.DateTimeField()
    team = models.ForeignKey(Team, on_delete=models.CASCADE, db_index=False, related_name="+")
    shard = models.PositiveSmallIntegerField()
    bucket_ms = models.BigIntegerField(help_text="the bucket's lower bound")
    deliveries = models.BigIntegerField()
    lateness_max_ms = models.BigIntegerField(help_text="the largest lateness counted in this row")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["minute", "team", "shard", "bucket_ms"],
                                               name="one_delivery_minute_row")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} [{self.bucket_ms} ms] x{self.deliveries}"


class AccuracyReport(models.Model):
    """One row of the nightly delay-accuracy report: messages due on ``day`` in one group
    (team x endpoint x version x delivery mode x delay bucket), or a rollup where a dimension is
    ``ALL`` ("*"); team ``*`` rows are platform-wide, for operators only. Rows are replaced whole
    per day by each run; names are copied, not linked, so the history outlives renamed or deleted
    endpoints and teams."""

    ALL = "*"
    DELAY_BUCKETS = ("<1s", "1-10s", "10-60s", "1-10min", "10-60min", "1-24h", ">=1d")

    day = models.DateField(help_text="due date (UTC) of the messages counted")
    team = models.CharField(max_length=40, default="default", help_text="the endpoint's team (copied, like its name)")
    endpoint = models.CharField(max_length=100)
    version = models.CharField(max_length=16)
    delivery_mode = models.CharField(max_length=32)
    delay_bucket = models.CharField(max_length=16, help_text="requested delay range, lower bound included")
    scheduled = models.PositiveBigIntegerField(help_text="messages due that day")
    delivered = models.PositiveBigIntegerField(help_text="arrived at the endpoint (once per message)")
    cancelled = models.PositiveBigIntegerField()
    failed = models.PositiveBigIntegerField(help_text="handler gave up, or unroutable")
    lost = models.PositiveBigIntegerField(help_text="still pending/published after due + grace")
    in_flight = models.PositiveBigIntegerField(help_text="pending/published, within the grace")
    duplicates = models.PositiveBigIntegerField(help_text="messages handed over more than once")
    early = models.PositiveBigIntegerField(help_text="delivered before due (lateness < 0)")
    scheduled_in_past = models.PositiveBigIntegerField(
        default=0, help_text="due before they were accepted (deliver_at in the past): lateness counts from acceptance")
    throttled = models.PositiveBigIntegerField(
        default=0, help_text="delivered after waiting for their endpoint's flow control; the wait is not lateness")
    throttled_max_ms = models.BigIntegerField(null=True, blank=True, help_text="the longest such wait")
    expired = models.PositiveBigIntegerField(
        default=0, db_default=0, help_text="not handed over by their expires_at: ended expired, never delivered")
    lateness_min_ms = models.BigIntegerField(null=True, blank=True)
    lateness_p50_ms = models.FloatField(null=True, blank=True)
    lateness_p95_ms = models.FloatField(null=True, blank=True)
    lateness_p99_ms = models.FloatField(null=True, blank=True)
    lateness_max_ms = models.BigIntegerField(null=True, blank=True)
    computed_at = models.DateTimeField(help_text="when the facts were taken; lost is judged at this time")

    class Meta:
        ordering = ["-day", "team", "endpoint", "version", "delivery_mode", "delay_bucket"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team", "endpoint", "version", "delivery_mode", "delay_bucket"],
                name="one_report_row_per_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.endpoint}/{self.version}/{self.delivery_mode}/{self.delay_bucket}"

    @property
    def problems(self) -> int:
        """Lost, duplicated and early messages: what an operator must look at."""
        return self.lost + self.duplicates + self.early


class ArchiveFile(ParquetFileListing):
    """One Parquet file of the archive (DELAY_ARCHIVE_DIR), listed in the transaction that deleted
    its rows, after it was written, made durable and read back. The archive is what this table
    lists: a file on disk that it does not list was left by a prune killed before its commit (its
    rows are still in the messages table), and the next prune removes it."""

    day = models.DateField(db_index=True, help_text="due date (UTC) of its messages: the accuracy report's day")

    class Meta(ParquetFileListing.Meta):
        pass
