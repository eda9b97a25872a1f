"""What the delivery engine keeps beside the messages: each handler attempt (MessageAttempt) and
each webhook endpoint's health (EndpointHealth: Retry-After, the circuit, failing since when).

EndpointHealth is a table of its own, like EndpointFlow: a form saving a whole endpoint row must
not write an old failure count or an old pause back."""

from django.db import models


class Trigger(models.TextChoices):
    """Why an attempt was made: the message came due, a handler retry came due, or a person asked
    (republish or resend one message: manual; a bulk action over a filter: bulk)."""

    SCHEDULED = "scheduled"
    RETRY = "retry"
    MANUAL = "manual"
    BULK = "bulk"


class AttemptOutcome(models.TextChoices):
    """What came of a handler attempt (a webhook call): ``ok`` or the class of its failure. Not
    delivery/services.py's Outcome, which says what a received copy came to."""

    OK = "ok"
    HTTP_STATUS = "http_status", "HTTP status (not 2xx)"
    DNS = "dns"
    REFUSED = "refused", "connection refused or reset"
    TLS = "tls"
    TIMEOUT = "timeout", "deadline passed"
    TOO_LARGE = "too_large", "answer over the cap"
    GUARD = "guard", "target refused by the SSRF guard"
    ERROR = "error", "other error"


class MessageAttempt(models.Model):
    """One handler attempt of a message (a webhook call, a task sent): kept with the message,
    pruned and archived with it."""

    message = models.ForeignKey("scheduling.ScheduledMessage", on_delete=models.CASCADE, related_name="attempt_log",
                                db_index=False)
    number = models.PositiveIntegerField(help_text="1 for the first attempt, 2 for its first retry, ...")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULED)
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True, help_text="the HTTP status, if one came")
    excerpt = models.TextField(blank=True, help_text="the start of the answer (or the error), capped")
    worker = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["message", "started_at"]
        indexes = [models.Index(fields=["message", "started_at"], name="attempt_message_started")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.message_id}: {self.outcome}"


class EndpointHealth(models.Model):
    """A webhook endpoint's state as every worker sees it: consecutive failures and since when it
    fails, the circuit (calls paused until a time, then one probe), and a receiver's Retry-After."""

    endpoint = models.OneToOneField("scheduling.Endpoint", on_delete=models.CASCADE, primary_key=True,
                                    related_name="health")
    consecutive_failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True, help_text="the first failure since the last success")
    paused_until = models.DateTimeField(null=True, blank=True,
                                        help_text="no call before this (Retry-After, or the circuit open)")
    circuit_opened = models.PositiveIntegerField(default=0, help_text="times the circuit opened in a row")
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        verbose_name_plural = "endpoint health"


class OrphanCopy(models.Model):
    """A copy the broker handed over that names no row: set aside for the operator, neither
    delivered blind nor dropped. After PostgreSQL is restored to an earlier time, the copies of
    the messages scheduled after that time are still in the cascade and arrive with no row
    (docs/operations/backup-and-restore.md). What the copy carried is kept as it came: a webhook or
    record-only copy carries its id and due time, not its payload (that lived in the lost row); a
    Celery task's copy carries the task itself. One row per copy (message id, attempt, queue): the
    same copy handed over again counts in ``times_seen``. Bounded: at most
    DELAY_ORPHAN_COPIES_MAX_PER_QUEUE rows a queue, each deleted by the prune once not seen for
    DELAY_ORPHAN_COPY_RETENTION (delivery/orphans.py)."""

    message_id = models.CharField(max_length=64, help_text="the id the copy names (no row has it)")
    attempt = models.PositiveIntegerField(default=0, help_text="0: the copy through the cascade; n: a retry's")
    queue = models.CharField(max_length=255, help_text="the endpoint queue the copy came from")
    endpoint = models.ForeignKey("scheduling.Endpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                 db_constraint=False, related_name="+", help_text="the queue's endpoint, if any")
    team = models.ForeignKey("scheduling.Team", null=True, blank=True, on_delete=models.SET_NULL,
                             db_constraint=False, related_name="+", help_text="that endpoint's team")
    due_at = models.DateTimeField(null=True, blank=True, help_text="the due time the copy carries")
    published_at = models.DateTimeField(null=True, blank=True, help_text="when it was published, if it says")
    version = models.CharField(max_length=16, blank=True, help_text="the cascade version it travelled")
    task = models.CharField(max_length=255, blank=True, help_text="the Celery task the copy is")
    headers = models.JSONField(default=dict, blank=True, help_text="the copy's headers, as carried")
    body = models.TextField(blank=True, help_text="the copy's body, as carried (capped)")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    times_seen = models.PositiveIntegerField(default=1)
    received_by = models.CharField(max_length=255, blank=True, help_text="the worker that set it aside")

    class Meta:
        ordering = ["-first_seen_at"]
        verbose_name_plural = "orphan copies"
        constraints = [models.UniqueConstraint(fields=["message_id", "attempt", "queue"], name="orphan_copy_once")]
        indexes = [
            models.Index(fields=["first_seen_at"], name="orphan_copy_first_seen"),  # the admin's and export's order
            models.Index(fields=["last_seen_at"], name="orphan_copy_last_seen"),  # the prune's (retention)
            models.Index(fields=["queue"], name="orphan_copy_queue"),  # the bound per queue, counted per batch
        ]

    def __str__(self) -> str:
        return f"copy of {self.message_id} on {self.queue} (no row)"
