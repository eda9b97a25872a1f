"""Where a team hears what happened (issue 48): each route names one of its endpoints and the
notification types it takes; a notification is a message to that endpoint (docs/guides/notifications.md)."""

from django.db import models
from uuid_utils.compat import uuid7

from scheduling.models.teams import Team


class NotificationType(models.TextChoices):
    """What the platform tells a team; a message of one carries its type in ``notification``."""

    MESSAGE_FAILED = "message.failed", "a handler gave up"
    MESSAGE_ATTEMPT_FAILING = "message.attempt_failing", "the 4th failed attempt in a row"
    ENDPOINT_DISABLED = "endpoint.disabled"
    ENDPOINT_CIRCUIT_OPENED = "endpoint.circuit_opened"
    QUOTA_WARNING = "quota.warning", "80 % of an in-flight quota"
    # a failure to deliver of its own (its time to be worth delivering passed), not a handler that
    # gave up: routed by its own type, so a route for message.failed hears no more than it asked for
    MESSAGE_EXPIRED = "message.expired", "a message expired before it was handed over"
    # a callback only (a message's on_delivered; its on_failed sends message.failed or message.expired)
    MESSAGE_DELIVERED = "message.delivered", "a message was delivered (callback)"


# what a route may take (a team asks for these; message.delivered is a callback's alone)
ROUTABLE = tuple(t.value for t in NotificationType if t is not NotificationType.MESSAGE_DELIVERED)


class NotificationRoute(models.Model):
    """A team's endpoint that takes the notifications of ``events`` (NotificationType values)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="notification_routes")
    endpoint = models.ForeignKey("scheduling.Endpoint", on_delete=models.CASCADE, related_name="notification_routes")
    events = models.JSONField(default=list, help_text="the notification types it takes")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["endpoint"], name="unique_notification_route_per_endpoint")]
        indexes = [models.Index(fields=["team", "created_at", "id"], name="notif_route_team_created")]

    def __str__(self) -> str:
        return f"{', '.join(self.events)} → {self.endpoint_id}"


class QuotaWarning(models.Model):
    """When a team was last told (quota.warning) that one of its in-flight quotas passed 80 %: at
    most once an hour per team and quota, across every process (notifications/services.py)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    quota = models.CharField(max_length=32)
    warned_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "quota"], name="unique_quota_warning_per_team")]

    def __str__(self) -> str:
        return f"{self.quota} at {self.warned_at:%Y-%m-%d %H:%M}"
