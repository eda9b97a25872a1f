"""Shapes of the notification routes' API (issue 48; docs/guides/notifications.md)."""

from rest_framework import serializers

from scheduling.api.validation import RefuseControlCharacters
from scheduling.models.notifications import ROUTABLE, NotificationRoute


class NotificationRouteSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    endpoint = serializers.SlugRelatedField(slug_field="name", read_only=True)
    events = serializers.ListField(child=serializers.CharField(), read_only=True,
                                   help_text=f"the notification types it takes: {', '.join(ROUTABLE)}")

    class Meta:
        model = NotificationRoute
        fields = ["id", "team", "endpoint", "events", "created_at"]
        read_only_fields = fields


class NotificationRouteCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    team = serializers.CharField(max_length=40, required=False, allow_null=True,
                                 help_text="one of your teams, where you have several")
    endpoint = serializers.CharField(max_length=100, help_text="one of the team's endpoints (webhook or record-only)")
    # bounded before it is read: each type once at most, each as long as the longest type
    events = serializers.ListField(
        child=serializers.CharField(max_length=max(map(len, ROUTABLE))), allow_empty=False,
        max_length=len(ROUTABLE), help_text=f"any of {', '.join(ROUTABLE)}")

    def validate_events(self, events: list[str]) -> list[str]:
        unknown = [e for e in events if e not in ROUTABLE]
        if unknown:
            raise serializers.ValidationError(f"unknown notification type {unknown[0]!r}; "
                                              f"types: {', '.join(ROUTABLE)}")
        return events
