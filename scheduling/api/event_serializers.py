"""Request and response shapes of subscriptions and events (issue 48). Types are checked here;
topics, patterns, filters, delays and quotas in events/services.py (one rule, shared)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.api.validation import RefuseControlCharacters
from scheduling.models import Event, Subscription


class SubscriptionSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    endpoint = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Subscription
        fields = ["id", "team", "topic", "endpoint", "filter", "created_at"]
        read_only_fields = fields


class SubscriptionCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    """A plain serializer: the model's unique constraint is the service's to answer (a 400 on topic)."""

    team = serializers.CharField(max_length=40, required=False, allow_null=True,
                                 help_text="the team it belongs to (needed when you may subscribe in several)")
    topic = serializers.CharField(max_length=255, help_text="a topic pattern: dot-separated words, '*' one word, "
                                                            "'#' zero or more (invoice.*, order.#)")
    endpoint = serializers.CharField(max_length=100, help_text="one of the team's endpoints, by name")
    filter = serializers.JSONField(required=False, help_text="payload field path -> a value or a list of values "
                                                             "(equal / any of); {} or absent: every event")


class EventMessageSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    endpoint = serializers.CharField()


class EventSerializer(serializers.ModelSerializer):
    """An event and the messages it made, one per subscribed endpoint (each a message of its own:
    GET /api/messages/<id>/)."""

    team = serializers.CharField(source="team.name", read_only=True)
    messages = serializers.SerializerMethodField()

    class Meta:
        model = Event
        fields = ["id", "team", "topic", "due_at", "idempotency_key", "created_at", "messages"]
        read_only_fields = fields

    @extend_schema_field(EventMessageSerializer(many=True))
    def get_messages(self, event) -> list[dict]:
        rows = self.context.get("messages", ())
        return [{"id": row.id, "endpoint": row.endpoint.name} for row in rows]


class EventCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    team = serializers.CharField(max_length=40, required=False, allow_null=True,
                                 help_text="the team that publishes (needed when you may publish in several)")
    topic = serializers.CharField(max_length=255, help_text="dot-separated words of letters, digits, '_' and '-' "
                                                            "(invoice.paid); at most 32 words")
    payload = serializers.JSONField(help_text="any JSON value, sent to every subscribed endpoint; filters read it")
    delay_seconds = serializers.DecimalField(max_digits=None, decimal_places=None, required=False, allow_null=True,
                                             help_text="seconds from now (ms precision); or give deliver_at")
    deliver_at = serializers.DateTimeField(required=False, allow_null=True,
                                           help_text="absolute UTC time, e.g. 2026-11-21T12:00:00.250Z")
    idempotency_key = serializers.CharField(max_length=255, required=False, allow_null=True,
                                            help_text="the same key in the same team answers the event it made")
    on_delivered = serializers.CharField(max_length=100, required=False, allow_null=True,
                                         help_text="an endpoint of the team that gets each message's outcome once "
                                                   "delivered (docs/guides/notifications.md)")
    on_failed = serializers.CharField(max_length=100, required=False, allow_null=True,
                                      help_text="an endpoint of the team that gets each message's outcome once failed")

    def to_service(self) -> dict:
        data = dict(self.validated_data)
        return {"team_name": data.get("team"), "topic": data["topic"], "payload": data["payload"],
                "delay": data.get("delay_seconds"), "deliver_at": data.get("deliver_at"),
                "idempotency_key": data.get("idempotency_key"), "on_delivered": data.get("on_delivered"),
                "on_failed": data.get("on_failed")}


class CancelledSerializer(serializers.Serializer):
    cancelled = serializers.IntegerField(help_text="messages of the event cancelled now (those still waiting)")
