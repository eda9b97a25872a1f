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


class Outcome(models.TextChoices):
    """What came of an attempt: ``ok`` or the class of its failure."""

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
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
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
