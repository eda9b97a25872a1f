"""Recurring messages: a rule and what its runs inherit."""

from __future__ import annotations

from datetime import timedelta

from django.core.validators import RegexValidator
from django.db import models

from scheduling.core import schedule_rules
from scheduling.core.ordering import Overlap
from scheduling.models.endpoints import Endpoint
from scheduling.models.teams import Team, default_team_id

schedule_key_validator = RegexValidator(
    r"^[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*$",
    "Use letters, digits, '-' and '_', in words joined by '.' or ':'.", code="invalid_key",
)




class Schedule(models.Model):
    """A recurring message: a cron rule in a timezone, or an interval. Each run is an ordinary
    ScheduledMessage, created ahead of its time by the materialiser (schedules/services.py)
    with the idempotency key (schedule, revision, run time); ``next_run_at`` is the first run
    not created yet. Changing the rule or the payload makes a new revision."""

    class MissedRuns(models.TextChoices):
        SKIP = "skip", "skip runs missed while the platform was down"
        LATEST = "latest", "run the latest missed run once, at once"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="schedules", default=default_team_id)
    key = models.CharField(max_length=200, validators=[schedule_key_validator])
    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, related_name="schedules")
    payload = models.JSONField()
    cron = models.CharField(max_length=200, blank=True, help_text="five fields: minute hour day month weekday")
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA name the cron rule is read in")
    interval_ms = models.BigIntegerField(null=True, blank=True)
    anchor_at = models.DateTimeField(null=True, blank=True, help_text="an interval schedule's first run")
    start_at = models.DateTimeField(null=True, blank=True, help_text="no run before this")
    end_at = models.DateTimeField(null=True, blank=True, help_text="no run after this")
    missed_runs = models.CharField(max_length=8, choices=MissedRuns.choices, default=MissedRuns.SKIP)
    is_paused = models.BooleanField(default=False)
    revision = models.PositiveIntegerField(default=1, help_text="raised when the rule or the payload changes")
    next_run_at = models.DateTimeField(null=True, blank=True, help_text="the first run not created yet")
    last_run_at = models.DateTimeField(null=True, blank=True, help_text="the last run created")
    runs_skipped = models.PositiveBigIntegerField(
        default=0, db_default=0, editable=False,
        help_text="runs not made because the team's messages in flight were at its quota")
    last_run_skipped_at = models.DateTimeField(null=True, blank=True, editable=False,
                                               help_text="the time of the last run skipped for the quota")
    # Policies of issue 49 (0033): nullable or db_default, so the previous release's INSERTs, which
    # do not name them, still work. NULL jitter: none; NULL catch-up: missed_runs decides.
    jitter_ms = models.BigIntegerField(
        null=True, blank=True, help_text="each run's due time moves by a fixed offset in [0, this) after its time")
    catchup_ms = models.BigIntegerField(
        null=True, blank=True, help_text="runs missed in a downtime and due within this before now are made up")
    runs_missed = models.BigIntegerField(
        default=0, db_default=0, editable=False,
        help_text="runs missed while the platform was down and not made (older than the catch-up window)")
    last_run_missed_at = models.DateTimeField(null=True, blank=True, editable=False,
                                              help_text="the time of the last run missed and not made")
    # Overlap (issue 49; 0035; core/ordering.py): db_default, so the previous release's INSERTs still work.
    overlap = models.CharField(
        max_length=12, choices=[(o.value, o.value) for o in Overlap], default=Overlap.ALLOW.value,
        db_default=Overlap.ALLOW.value,
        help_text="a run due while the previous run has not ended: sent anyway (allow), not sent (skip), or "
                  "waits for its end, one at most (buffer_one)")
    runs_overlap_skipped = models.BigIntegerField(
        default=0, db_default=0, editable=False,
        help_text="runs not sent because the previous run had not ended (its overlap policy)")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["team", "key"], name="one_schedule_key_per_team"),
            models.CheckConstraint(
                condition=(models.Q(cron="") & models.Q(interval_ms__isnull=False))
                | (~models.Q(cron="") & models.Q(interval_ms__isnull=True)),
                name="schedule_cron_or_interval",
            ),
        ]
        indexes = [  # what the materialiser looks at
            models.Index(fields=["next_run_at"], name="schedule_due",
                         condition=models.Q(is_paused=False, next_run_at__isnull=False)),
        ]
        permissions = [("pause_schedule", "Can pause and resume schedules")]

    def __str__(self) -> str:
        return self.key

    @property
    def rule(self) -> schedule_rules.Rule:
        return schedule_rules.Rule(cron=self.cron, tz=self.timezone, interval_ms=self.interval_ms,
                               anchor=self.anchor_at, start=self.start_at, end=self.end_at)

    def upcoming(self, now, count: int = 1) -> list:
        """The next ``count`` runs after ``now``, UTC; none while paused (what the API's
        next_run_at and the admin's next runs show)."""
        return [] if self.is_paused else schedule_rules.preview(self.rule, after=now, count=count)

    @property
    def interval_seconds(self):
        return None if self.interval_ms is None else self.interval_ms / 1000

    @property
    def jitter_seconds(self):
        return None if self.jitter_ms is None else self.jitter_ms / 1000

    @property
    def catchup_seconds(self):
        return None if self.catchup_ms is None else self.catchup_ms / 1000

    def run_due_at(self, run_at):
        """When its run of nominal time ``run_at`` is due: moved by its jitter, fixed per run."""
        return run_at + timedelta(milliseconds=schedule_rules.jitter_offset_ms(
            seed=f"{self.team_id}:{self.key}", run_at=run_at, jitter_ms=self.jitter_ms))
