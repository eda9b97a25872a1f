"""Subscriptions and events (issue 48): a team publishes an event to a topic once, and each of its
subscriptions whose pattern and filter match it gets a message of its own (docs/guides/events.md).

The messages are ordinary rows (``ScheduledMessage.event`` names the event), so each is delivered,
retried, cancelled, listed and audited as any message is; the event keeps what was published and
how many messages it made."""

from django.db import models
from uuid_utils.compat import uuid7

from scheduling.models.teams import Team


class Subscription(models.Model):
    """A team's endpoint subscribed to a topic pattern (``*`` one word, ``#`` zero or more, as AMQP
    topics), narrowed by an optional filter on the payload (field path -> a value or a list of them)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="subscriptions")
    topic = models.CharField(max_length=255, help_text="a topic pattern: dot-separated words, * one word, # any")
    endpoint = models.ForeignKey("scheduling.Endpoint", on_delete=models.CASCADE, related_name="subscriptions")
    filter = models.JSONField(default=dict, blank=True,
                              help_text="payload field path -> a value or a list of values (equal / any of)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["endpoint", "topic", "filter"],
                                               name="unique_subscription_per_endpoint")]
        indexes = [models.Index(fields=["team", "created_at", "id"], name="subscription_team_created")]

    def __str__(self) -> str:
        return f"{self.topic} → {self.endpoint_id}"


class Event(models.Model):
    """One publish to a topic: the messages it made name it (``ScheduledMessage.event``)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="events")
    topic = models.CharField(max_length=255)
    payload = models.JSONField()
    due_at = models.DateTimeField()
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    message_count = models.PositiveIntegerField(default=0, help_text="messages it made (0: no subscription matched)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["team", "idempotency_key"],
                                               condition=models.Q(idempotency_key__isnull=False),
                                               name="unique_event_idempotency_key_per_team")]
        indexes = [models.Index(fields=["team", "created_at", "id"], name="event_team_created"),
                   models.Index(fields=["created_at"], name="event_created")]

    def __str__(self) -> str:
        return f"{self.topic} at {self.due_at:%Y-%m-%d %H:%M:%S}"
