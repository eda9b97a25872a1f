"""Request and response shapes. Input is checked for type here; every rule about what may be
scheduled lives in the services, shared with the admin and Python callers."""

import math
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.api.callers import request_caller
from scheduling.api.validation import RefuseControlCharacters
from scheduling.config.conf import conf, setting_name
from scheduling.core.flow_gate import MAX_CONCURRENT, MAX_DELIVERIES_PER_SECOND
from scheduling.core.lifecycle import Status, scheduled_in_past
from scheduling.core.ordering import Overlap
from scheduling.core.roles import Action
from scheduling.core.schedule_rules import run_time_of_key
from scheduling.core.text import has_control_characters, has_nul
from scheduling.messages.selectors import message_list_waiting_for
from scheduling.messages.structured import TASK_ID
from scheduling.models import (
    FLOW_KEY_MAX_LENGTH,
    BulkAction,
    DeliveryMode,
    Endpoint,
    EndpointHealth,
    MessageAttempt,
    Schedule,
    ScheduledMessage,
    TopologyVersion,
)
from scheduling.security.redaction import url_redacted


class VersionField(serializers.SlugRelatedField):
    """A topology version by name; input the database cannot even compare (NUL) is invalid."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", queryset=TopologyVersion.objects.all(), **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and has_nul(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class EndpointHealthSerializer(serializers.ModelSerializer):
    """How a webhook endpoint's calls are going, as every worker sees it (all zero and null until
    a call fails)."""

    class Meta:
        model = EndpointHealth
        fields = ["consecutive_failures", "failing_since", "paused_until", "circuit_opened", "last_success_at",
                  "last_failure_at", "last_error"]
        read_only_fields = fields


def _timeout_help() -> str:
    return (f"one deadline over each webhook call, in seconds (0.1 up to {setting_name('webhook_timeout_max_seconds')}); "
            f"null: the platform's ({setting_name('webhook_timeout_seconds')})")


class EndpointSerializer(RefuseControlCharacters, serializers.ModelSerializer):
    team = serializers.CharField(
        source="team.name", required=False, max_length=40,
        help_text="the team that owns it (creating: needed when you may create endpoints in several teams)")
    queue = serializers.CharField(
        required=False, max_length=255,
        help_text="the broker queue its messages arrive in: <team>--<name>; an exact name only platform "
                  "operators may give (NServiceBus interop, a Celery queue)")
    topology = VersionField(
        required=False,
        help_text=f"cascade version for new messages (default: the setting {setting_name('default_version')})",
    )
    webhook_secret = serializers.CharField(
        write_only=True, required=False, max_length=128,
        help_text="Standard Webhooks signing secret, whsec_<base64 of 24-64 random bytes> (generated when "
                  "omitted; answered once, by the create call, never by reads)",
    )
    webhook_timeout_seconds = serializers.FloatField(required=False, allow_null=True, min_value=0.1,
                                                     help_text=_timeout_help())
    disabled_at = serializers.DateTimeField(
        read_only=True, help_text="when the platform disabled it for failing too long (is_active is then false; its "
                                  "messages are kept): PATCH is_active true to enable it")
    disabled_reason = serializers.CharField(read_only=True)
    health = serializers.SerializerMethodField()
    message_counts = serializers.SerializerMethodField()
    message_counts_estimated = serializers.SerializerMethodField()

    class Meta:
        model = Endpoint
        fields = ["team", "name", "queue", "topology", "delivery_mode", "handler", "handler_target", "webhook_secret",
                  "max_deliveries_per_second", "max_concurrent", "max_deliveries_per_second_per_key",
                  "max_concurrent_per_key", "webhook_timeout_seconds", "is_active", "disabled_at", "disabled_reason",
                  "health", "created_at", "message_counts", "message_counts_estimated"]
        read_only_fields = ["is_active", "created_at"]

    def to_representation(self, endpoint):
        """Below who may change the endpoint (a team's viewers and members, a key without the
        endpoints scope), a webhook URL's query values and userinfo are masked."""
        data = super().to_representation(endpoint)
        request = self.context.get("request")
        if data.get("handler_target") and request is not None and not request_caller(request).may(
                Action.ENDPOINTS, endpoint.team_id):
            data["handler_target"] = url_redacted(data["handler_target"])
        return data

    @extend_schema_field(EndpointHealthSerializer)
    def get_health(self, endpoint) -> dict:
        try:
            health = endpoint.health
        except EndpointHealth.DoesNotExist:  # no call has failed yet
            health = EndpointHealth(endpoint=endpoint)
        return EndpointHealthSerializer(health).data

    def get_message_counts(self, endpoint) -> dict[str, int]:
        """Messages per status: exact up to 1,000; above, PostgreSQL's estimate (the status is
        then listed in message_counts_estimated). Computed by the view for its page."""
        counts = self.context.get("message_counts", {}).get(endpoint.pk)
        return {status.value: int(counts[status.value]) if counts else 0 for status in Status}

    def get_message_counts_estimated(self, endpoint) -> list[str]:
        """The statuses whose count in message_counts is an estimate (more than 1,000 messages)."""
        counts = self.context.get("message_counts", {}).get(endpoint.pk) or {}
        return [status for status, count in counts.items() if not count.exact]


class EndpointCreatedSerializer(EndpointSerializer):
    """The answer to creating an endpoint: a webhook endpoint's secret appears here, once."""

    webhook_secret = serializers.CharField(read_only=True, help_text="webhook endpoints only: store it now")


class RotateSecretSerializer(RefuseControlCharacters, serializers.Serializer):
    secret = serializers.CharField(required=False, max_length=128,
                                   help_text="the new secret, whsec_<base64 of 24-64 random bytes> (generated when omitted)")
    previous_valid_seconds = serializers.IntegerField(
        required=False, min_value=0, max_value=30 * 86400,
        help_text="how long the current secret keeps signing beside the new one (default 86400; 0: not at all)",
    )


class SecretRotatedSerializer(serializers.Serializer):
    name = serializers.CharField()
    webhook_secret = serializers.CharField(help_text="the new secret: shown here once")
    previous_valid_until = serializers.DateTimeField(allow_null=True,
                                                     help_text="until when the previous secret also signs")


class EndpointUpdateSerializer(RefuseControlCharacters, serializers.Serializer):
    """What may change on an existing endpoint: where its *new* messages go."""

    topology = VersionField(required=False)
    delivery_mode = serializers.ChoiceField(choices=DeliveryMode.choices, required=False)
    handler = serializers.ChoiceField(
        choices=Endpoint.Handler.choices, required=False,
        help_text="how its messages are handled; to or from celery_queue only while none is in flight (400 "
                  "naming how many are)")
    handler_target = serializers.CharField(required=False, allow_blank=True, max_length=500,
                                           help_text="the Celery task's name, or the webhook's URL")
    max_deliveries_per_second = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_DELIVERIES_PER_SECOND,
        help_text="hand-overs in any one second, across all workers; null: no limit")
    max_concurrent = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_CONCURRENT,
        help_text="webhook calls in flight at once, across all workers (webhook endpoints); null: no limit")
    max_deliveries_per_second_per_key = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_DELIVERIES_PER_SECOND,
        help_text="hand-overs in any one second per flow_key of its messages, across all workers; null: no limit")
    max_concurrent_per_key = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_CONCURRENT,
        help_text="webhook calls in flight at once per flow_key, across all workers (webhook endpoints); "
                  "null: no limit")
    webhook_timeout_seconds = serializers.FloatField(required=False, allow_null=True, min_value=0.1,
                                                     help_text=_timeout_help())
    is_active = serializers.BooleanField(
        required=False, help_text="true: enable it (re-bound; an endpoint the platform disabled has its disabled "
                                  "state cleared and its health reset); false: pause it, as deactivate does")


_DEBOUNCE_SCHEMA = {
    "type": "object", "nullable": True, "additionalProperties": False, "required": ["key", "seconds"],
    "description": "debounce by key on its endpoint (docs/guides/scheduling.md#debounce); a 400 names "
                   "debounce.<field>",
    "properties": {
        "key": {"type": "string", "minLength": 1, "maxLength": 200, "description": "per endpoint (and so per team)"},
        "seconds": {"type": "integer", "minimum": 1,
                    "description": "trailing: due this long after the newest; leading: the window's length"},
        "max_seconds": {"type": "integer", "minimum": 1,
                        "description": "trailing only (required): never due later than this after the window's "
                                       "first; at least seconds, at most the endpoint's longest delay"},
        "mode": {"type": "string", "enum": ["trailing", "leading"], "default": "trailing"},
    },
}


@extend_schema_field(_DEBOUNCE_SCHEMA)
class DebounceField(serializers.JSONField):
    """Read as JSON and checked by the service (core/debounce.py parse), which names each field."""


class DebounceSerializer(serializers.Serializer):
    """A message's debounce as shown (read only: the request's is DebounceField)."""

    key = serializers.CharField(read_only=True)
    seconds = serializers.IntegerField(read_only=True)
    max_seconds = serializers.IntegerField(read_only=True, allow_null=True, help_text="trailing only")
    mode = serializers.ChoiceField(read_only=True, choices=["trailing", "leading"])
    until = serializers.DateTimeField(read_only=True, help_text="trailing: the window's cap; leading: its end")


class MessageCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    team = serializers.CharField(max_length=40, required=False, allow_null=True,
                                 help_text="the endpoint's team, where several of yours have one of that name")
    endpoint = serializers.CharField(max_length=100)
    payload = serializers.JSONField(help_text="any JSON value, at most 256 KiB; to a celery_queue endpoint a task: "
                                              '{"task": "...", "args": [...], "kwargs": {...}}')
    delay_seconds = serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True,
        help_text="seconds from now, fractions allowed (ms precision); or give deliver_at",
    )
    deliver_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="absolute UTC time, e.g. 2026-11-21T12:00:00.250Z"
    )
    idempotency_key = serializers.CharField(
        max_length=255, required=False, allow_null=True,
        help_text="the same key on the same endpoint returns the existing message",
    )
    on_delivered = serializers.CharField(
        max_length=100, required=False, allow_null=True,
        help_text="an endpoint of the message's team that gets its outcome record (message.delivered) once "
                  "delivered (docs/guides/notifications.md)")
    on_failed = serializers.CharField(
        max_length=100, required=False, allow_null=True,
        help_text="an endpoint of the message's team that gets its outcome record (message.failed) once its "
                  "handler gave up")
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text="never handed over from this time on (after the due time): it ends expired; or give "
                  "expire_after_seconds")
    expire_after_seconds = serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True,
        help_text="seconds after the due time from which it is never handed over (ends expired); at most the "
                  "longest delay")
    debounce = DebounceField(required=False, allow_null=True)
    flow_key = serializers.CharField(
        max_length=FLOW_KEY_MAX_LENGTH, required=False, allow_null=True,
        help_text="its flow key: the endpoint's max_deliveries_per_second_per_key and max_concurrent_per_key "
                  "count it with the messages of the same key (docs/guides/flow-control.md)")
    ordering_key = serializers.CharField(
        max_length=200, required=False, allow_null=True, trim_whitespace=False,
        help_text="messages of the endpoint with the same key are handed over one at a time, in due order, each "
                  "after the one before it ended (docs/guides/scheduling.md#ordering); not on celery_queue "
                  "endpoints")

    def to_item(self) -> dict:
        return message_item(self.validated_data)

    def run_validation(self, data=serializers.empty):
        """A message that plainly has the right types takes a short path (a bulk request has
        1,000 of them, and DRF's field machinery costs ~50 µs each); anything else goes through
        the fields, which name what is wrong."""
        plain = _plain_message(data)
        return plain if plain is not None else super().run_validation(data)


_MESSAGE_FIELDS = frozenset({"team", "endpoint", "payload", "delay_seconds", "deliver_at", "idempotency_key"})


def _plain_message(data) -> dict | None:
    """The validated data of a message whose fields need no conversion but the delay's, or None.
    Mirrors the fields' rules: a trimmed, non-empty endpoint of at most 100 characters; any
    payload but null; a finite delay given as a number or a short numeric string; no deliver_at
    (its parsing is the DateTimeField's); an idempotency key absent, null, or trimmed and short;
    no string but the payload with a character the fields refuse (api/validation.py)."""
    if type(data) is not dict or not data.keys() <= _MESSAGE_FIELDS or data.get("deliver_at") is not None:
        return None
    if any(type(v) is str and has_control_characters(v) for k, v in data.items() if k != "payload"):
        return None
    endpoint, key, delay = data.get("endpoint"), data.get("idempotency_key"), data.get("delay_seconds")
    if type(endpoint) is not str or not 0 < len(endpoint) <= 100 or endpoint != endpoint.strip():
        return None
    team = data.get("team")
    if team is not None and (type(team) is not str or not 0 < len(team) <= 40 or team != team.strip()):
        return None
    if key is not None and (type(key) is not str or not 0 < len(key) <= 255 or key != key.strip()):
        return None
    if data.get("payload") is None:
        return None
    if type(delay) is int:
        delay = Decimal(delay)
    elif type(delay) is float and math.isfinite(delay) or type(delay) is str and 0 < len(delay) <= 100:
        try:
            delay = Decimal(str(delay).strip())
        except InvalidOperation:
            return None
        if not delay.is_finite():
            return None
    elif delay is not None:
        return None
    plain = {"endpoint": endpoint, "payload": data["payload"]}
    if "team" in data:
        plain["team"] = team
    if "delay_seconds" in data:
        plain["delay_seconds"] = delay
    if "deliver_at" in data:
        plain["deliver_at"] = None
    if "idempotency_key" in data:
        plain["idempotency_key"] = key
    return plain


def message_item(data: dict) -> dict:
    """Validated API input -> the keyword arguments of the scheduling service."""
    return {
        "team": data.get("team"),
        "endpoint": data["endpoint"],
        "payload": data["payload"],
        "delay": data.get("delay_seconds"),
        "deliver_at": data.get("deliver_at"),
        "idempotency_key": data.get("idempotency_key"),
        "on_delivered": data.get("on_delivered"),
        "on_failed": data.get("on_failed"),
        "expires_at": data.get("expires_at"),
        "expire_after_seconds": data.get("expire_after_seconds"),
        "debounce": data.get("debounce"),
        "flow_key": data.get("flow_key"),
        "ordering_key": data.get("ordering_key"),
    }


class MessageFilterSerializer(RefuseControlCharacters, serializers.Serializer):
    """The message list's query parameters (a NUL in one reached PostgreSQL: a 500)."""

    team = serializers.CharField(required=False, max_length=40, help_text="one of your teams")
    endpoint = serializers.CharField(required=False, max_length=100)
    status = serializers.ChoiceField(choices=[s.value for s in Status], required=False)
    schedule = serializers.CharField(required=False, max_length=200, help_text="the runs of this schedule (its key)")


class MessageRescheduleSerializer(RefuseControlCharacters, serializers.Serializer):
    """A new due time for a pending or published message: exactly one of the two."""

    delay_seconds = serializers.DecimalField(max_digits=None, decimal_places=None, required=False, allow_null=True,
                                             help_text="seconds from now, fractions allowed (ms precision)")
    deliver_at = serializers.DateTimeField(required=False, allow_null=True, help_text="absolute UTC time")


class MessageMatchSerializer(RefuseControlCharacters, serializers.Serializer):
    """The messages a bulk cancel or republish acts on (at least one filter; bounds exclusive), in
    one team: never past the caller's teams."""

    team = serializers.CharField(required=False, max_length=40,
                                 help_text="the team whose messages it acts on (needed if you may act in several)")
    endpoint = serializers.CharField(required=False, max_length=100)
    status = serializers.ChoiceField(choices=[s.value for s in Status], required=False)
    schedule = serializers.CharField(required=False, max_length=200, help_text="a recurring schedule's runs")
    due_before = serializers.DateTimeField(required=False)
    due_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    created_after = serializers.DateTimeField(required=False)
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="count the matching messages, change nothing")


class CountSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="messages changed (or, in a dry run, that would be)")


class DryRunCountSerializer(serializers.Serializer):
    """A bulk cancel's or republish's dry run: counted no further than a cap."""

    count = serializers.IntegerField(read_only=True, help_text="messages that would change now: exact up to "
                                                               "10,000; above, 10,000 with exact false")
    exact = serializers.BooleanField(read_only=True, help_text="false: more than count")


class BulkJobSerializer(serializers.ModelSerializer):
    """A bulk cancel or republish, run by a worker batch by batch (202 when started; its status_url
    answers this until it is done or failed)."""

    team = serializers.CharField(source="team.name", default=None, read_only=True)
    count = serializers.IntegerField(source="matched", read_only=True,
                                     help_text="messages matching when it started (what it will change)")
    status_url = serializers.SerializerMethodField()

    class Meta:
        model = BulkAction
        fields = ["id", "kind", "team", "filters", "state", "count", "matched", "done", "error", "requested_by",
                  "created_at", "finished_at", "status_url"]
        read_only_fields = fields

    def get_status_url(self, action) -> str:
        url = reverse("bulkaction-detail", args=[action.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None else url


class TaskClaimSerializer(RefuseControlCharacters, serializers.Serializer):
    """A worker of another codebase about to run a task that came out of the cascade (the id is
    its message's header x-dp-message-id)."""

    redelivered = serializers.BooleanField(
        required=False, default=False,
        help_text="the broker marked the task message redelivered (its worker died mid-run, acks_late): "
                  "it runs again even if it was delivered")
    worker = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                   help_text="the worker's hostname, recorded as the one that delivered it")


class TaskClaimedSerializer(serializers.Serializer):
    """The answer to a claim (read-only: no request is read through it)."""

    id = serializers.UUIDField(read_only=True)
    status = serializers.CharField(read_only=True, help_text="the message's status after the claim")
    run = serializers.BooleanField(read_only=True,
                                   help_text="run the task: false for a cancelled task, a second hand-over of one "
                                             "already delivered, or a message whose ordering key's turn it is not "
                                             "(status waiting: it comes again when it is; or a schedule's run ended "
                                             "skipped): skip it, and acknowledge the message")
    ordered = serializers.BooleanField(read_only=True,
                                       help_text="the run holds an ordering key's turn (the message's key, or the "
                                                 "key of the first run a retry continues): report its end with "
                                                 "POST /api/messages/<id>/ended/ so the next message of the key goes")


class TaskEndedSerializer(RefuseControlCharacters, serializers.Serializer):
    """A worker of another codebase reports that a task it claimed ended (its key's turn ends)."""

    retrying = serializers.BooleanField(
        required=False, default=False,
        help_text="the task ended by retrying (Celery's RETRY): its ordering key stays held for the retry, for "
                  "another lease, and the next message of the key keeps waiting")


class TaskEndAnswerSerializer(serializers.Serializer):
    """The answer to a task's end (read-only)."""

    id = serializers.UUIDField(read_only=True)
    turn = serializers.ChoiceField(
        read_only=True, choices=["ended", "kept", "none"],
        help_text="ended: the run held its ordering key, let go (the next message of the key is woken); kept: "
                  "retrying, held for another lease; none: no key, or the key's turn is not this run's (ended "
                  "already, its lease passed): nothing changed")


class TaskCancelSerializer(RefuseControlCharacters, serializers.Serializer):
    """Every waiting run of a Celery task id: its first run and its delayed retries."""

    task_id = serializers.RegexField(
        rf"\A(?:{TASK_ID.pattern})\Z", max_length=155, trim_whitespace=False,
        error_messages={"invalid": "must be 1 to 155 of letters, digits and . _ : -"},
        help_text="the Celery task id (its runs' idempotency keys: <task id>, <task id>#retry<n>)")
    endpoint = serializers.CharField(required=False, max_length=100,
                                     help_text="the celery_queue endpoint's name: only its messages are searched")
    team = serializers.CharField(required=False, max_length=40,
                                 help_text="one of your teams (default: every team where you may cancel)")


class BulkCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    messages = MessageCreateSerializer(many=True, allow_empty=False,
                                       help_text=f"at most {setting_name('bulk_max')} (1,000)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # checked before any item is validated: an oversized request costs nothing
        self.fields["messages"].max_length = conf().bulk_max


@extend_schema_field({"type": "string", "nullable": True, "description": "an endpoint's name"})
class CallbackEndpointField(serializers.Field):
    """A callback endpoint's name (or null), looked up once per endpoint for a whole page (on the
    root serializer): a related field would query once per message."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def get_attribute(self, instance):
        return getattr(instance, f"{self.source}_id")

    def to_representation(self, endpoint_id):
        names = self.root.__dict__.setdefault("_callback_names", {})
        if endpoint_id not in names:
            names[endpoint_id] = Endpoint.objects.filter(pk=endpoint_id).values_list("name", flat=True).first()
        return names[endpoint_id]


@extend_schema_field({"type": "string", "format": "uuid", "nullable": True,
                      "description": "status waiting: the message of its ordering key it waits for"})
class WaitingForField(serializers.Field):
    """What a waiting message waits for (message_list_waiting_for), computed for the whole page at
    its first waiting message (on the root serializer): one statement a page, none when nothing on
    it waits; per message it would be a query each."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, allow_null=True, source="*", **kwargs)

    def to_representation(self, message):
        if message.status != Status.WAITING:
            return None
        answers = self.root.__dict__.get("_waiting_for")
        if answers is None or str(message.id) not in answers:
            shown = self.root.instance
            page = list(shown) if isinstance(shown, (list, tuple)) else [message]
            answers = self.root.__dict__["_waiting_for"] = message_list_waiting_for(
                messages=page if message in page else [message])
        return answers.get(str(message.id))


class MessageSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="endpoint.team.name", read_only=True)
    endpoint = serializers.SlugRelatedField(slug_field="name", read_only=True)
    topology = serializers.SlugRelatedField(slug_field="name", read_only=True)
    scheduled_in_past = serializers.SerializerMethodField(
        help_text="due_at (as requested) was before created_at: delivered at once, and lateness_ms "
                  "counts from created_at, not from the past due time")
    on_delivered = CallbackEndpointField(help_text="the endpoint that gets its outcome record once delivered")
    on_failed = CallbackEndpointField(
        help_text="the endpoint that gets its outcome record once its handler gave up")
    debounce = serializers.SerializerMethodField(help_text="its debounce and window, or null")
    schedule_run_at = serializers.SerializerMethodField(
        help_text="a schedule's run: its time by the schedule's rule (due_at is that moved by its jitter); "
                  "null for other messages")
    waiting_for = WaitingForField(
        help_text="status waiting: the id of the message of its ordering key it waits for (the one whose "
                  "call is still out, else the first open one due before it); null otherwise")

    class Meta:
        model = ScheduledMessage
        fields = ["id", "team", "endpoint", "topology", "status", "due_at", "requested_delay_ms", "routing_key",
                  "first_exchange", "created_at", "published_at", "delivered_at", "cancelled_at",
                  "lateness_ms", "scheduled_in_past", "delivery_count", "idempotency_key", "schedule",
                  "due_history", "trigger", "last_error", "payload", "on_delivered", "on_failed", "notification"]
        fields += ["event", "flow_key"]  # the event whose fan-out made it (its id; null: scheduled alone)
        fields += ["expires_at"]  # never handed over from then on (null: never expires)
        fields += ["debounce"]
        fields += ["schedule_run_at"]  # a schedule's run: its time by the rule (its key names it)
        fields += ["ordering_key", "waiting_since"]  # its key's turn; since when it waited for it (status waiting)
        fields += ["waiting_for"]  # status waiting: the message of its key it waits for (computed on read)
        read_only_fields = fields

    @extend_schema_field(DebounceSerializer(allow_null=True))
    def get_debounce(self, message) -> dict | None:
        if message.debounce_key is None:
            return None
        return DebounceSerializer(instance={"key": message.debounce_key, "seconds": message.debounce_seconds,
                                            "max_seconds": message.debounce_max_seconds, "mode": message.debounce_mode,
                                            "until": message.debounce_until}).data

    def get_scheduled_in_past(self, message) -> bool:
        return scheduled_in_past(message.due_at, message.created_at)

    def get_schedule_run_at(self, message) -> datetime | None:
        return run_time_of_key(message.idempotency_key) if message.schedule else None


class MessageAttemptSerializer(serializers.ModelSerializer):
    """One handler attempt of a message: a webhook call (or a task sent), what came of it and why
    it was made."""

    class Meta:
        model = MessageAttempt
        fields = ["number", "trigger", "started_at", "duration_ms", "outcome", "status_code", "excerpt", "worker"]
        read_only_fields = fields


class MessageCreatedSerializer(serializers.Serializer):
    """What a bulk call answers per message: lean, because it answers 1,000 of them."""

    id = serializers.UUIDField()
    team = serializers.CharField()
    endpoint = serializers.CharField()
    topology = serializers.CharField()
    status = serializers.CharField()
    due_at = serializers.DateTimeField()
    requested_delay_ms = serializers.IntegerField()
    routing_key = serializers.CharField()
    idempotency_key = serializers.CharField(allow_null=True)
    debounce = DebounceSerializer(allow_null=True, help_text="its debounce and window, or null (as a single answer)")

    @staticmethod
    def represent(message) -> dict:
        """The same fields, built directly (DRF's field machinery cost ~0.1 ms per message)."""
        debounce = None if message.debounce_key is None else {
            "key": message.debounce_key, "seconds": message.debounce_seconds,
            "max_seconds": message.debounce_max_seconds, "mode": message.debounce_mode,
            "until": message.debounce_until.isoformat().replace("+00:00", "Z") if message.debounce_until else None}
        return {
            "id": str(message.id),
            "team": message.endpoint.team.name,
            "endpoint": message.endpoint.name,
            "topology": message.topology.name,
            "status": message.status,
            "due_at": message.due_at.isoformat().replace("+00:00", "Z"),
            "requested_delay_ms": message.requested_delay_ms,
            "routing_key": message.routing_key,
            "idempotency_key": message.idempotency_key,
            "debounce": debounce,
        }


class StatusSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField()


class ScheduleSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    endpoint = serializers.SlugRelatedField(slug_field="name", read_only=True)
    interval_seconds = serializers.FloatField(read_only=True, allow_null=True)
    jitter_seconds = serializers.FloatField(
        read_only=True, allow_null=True, help_text="each run is due a fixed offset in [0, this) after its time")
    catchup_seconds = serializers.FloatField(
        read_only=True, allow_null=True,
        help_text="after a downtime, its missed runs due within this before now are made (null: missed_runs)")
    next_run_at = serializers.SerializerMethodField(
        help_text="the next run after now (null when paused or when no run is left)")
    next_run_due_at = serializers.SerializerMethodField(
        help_text="when that run is due: next_run_at moved by its jitter")

    class Meta:
        model = Schedule
        fields = ["team", "key", "endpoint", "payload", "cron", "timezone", "interval_seconds", "start_at", "end_at",
                  "missed_runs", "jitter_seconds", "catchup_seconds", "overlap", "is_paused", "next_run_at",
                  "next_run_due_at", "revision", "runs_skipped", "last_run_skipped_at", "runs_missed",
                  "last_run_missed_at", "runs_overlap_skipped", "created_at", "updated_at"]
        read_only_fields = fields

    def get_next_run_at(self, schedule) -> datetime | None:
        return next(iter(schedule.upcoming(timezone.now())), None)

    def get_next_run_due_at(self, schedule) -> datetime | None:
        run = self.get_next_run_at(schedule)
        return None if run is None else schedule.run_due_at(run)


class ScheduleWriteSerializer(RefuseControlCharacters, serializers.Serializer):
    """An upsert: the schedule ``key`` becomes exactly this (fields left out take their defaults)."""

    team = serializers.CharField(max_length=40, required=False,
                                 help_text="the team it belongs to (needed if you may keep schedules in several)")
    key = serializers.CharField(max_length=200, help_text="unique in its team; posting the same key again updates "
                                                           "the team's schedule")
    endpoint = serializers.CharField(max_length=100)
    payload = serializers.JSONField(help_text="any JSON value, at most 256 KiB: every run carries it")
    cron = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                 help_text="five fields (minute hour day month weekday), e.g. '30 2 * * 1-5'; "
                                           "or give interval_seconds")
    timezone = serializers.CharField(required=False, max_length=64,
                                     help_text="IANA name the cron rule is read in (default UTC)")
    interval_seconds = serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True,
        help_text="seconds between runs, at least 1, fractions allowed")
    start_at = serializers.DateTimeField(required=False, allow_null=True,
                                         help_text="no run before this; an interval schedule's first run")
    end_at = serializers.DateTimeField(required=False, allow_null=True, help_text="no run after this")
    missed_runs = serializers.ChoiceField(choices=Schedule.MissedRuns.choices, required=False,
                                          help_text="runs missed while the platform was down: skip them "
                                                    "(default), or run the latest one once, at once")
    jitter_seconds = serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True,
        help_text="each run is due a fixed offset in [0, this) after its time, at most a day and below the "
                  "gap between two runs (default none)")
    catchup_seconds = serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True,
        help_text="after a downtime, its missed runs due within this before now are made, oldest first; older "
                  "ones are skipped and counted (0 to 31 days; null: missed_runs decides)")
    overlap = serializers.ChoiceField(
        choices=[o.value for o in Overlap], required=False,
        help_text="a run due while the previous run has not ended (its webhook call or task still running): "
                  "sent anyway (allow, the default), not sent, ended skipped (skip), or kept waiting for its end, "
                  "one at most, a later one skipped (buffer_one)")

    def to_service(self) -> dict:
        data = self.validated_data
        return {"key": data["key"], "endpoint": data["endpoint"], "payload": data["payload"],
                "team_name": data.get("team"),
                "cron": data.get("cron", ""), "timezone_name": data.get("timezone", "UTC"),
                "interval_seconds": data.get("interval_seconds"), "start_at": data.get("start_at"),
                "end_at": data.get("end_at"), "missed_runs": data.get("missed_runs", Schedule.MissedRuns.SKIP),
                "jitter_seconds": data.get("jitter_seconds"), "catchup_seconds": data.get("catchup_seconds"),
                "overlap": data.get("overlap", Overlap.ALLOW.value)}


class SchedulePreviewSerializer(RefuseControlCharacters, serializers.Serializer):
    cron = serializers.CharField(required=False, allow_blank=True, max_length=200)
    timezone = serializers.CharField(required=False, max_length=64)
    interval_seconds = serializers.DecimalField(max_digits=None, decimal_places=None, required=False)
    start_at = serializers.DateTimeField(required=False, help_text="an interval's first run (default: after)")
    after = serializers.DateTimeField(required=False, help_text="runs after this time (default: now)")
    count = serializers.IntegerField(required=False, min_value=1, max_value=100, default=10)


class RunsSerializer(serializers.Serializer):
    runs = serializers.ListField(child=serializers.DateTimeField(), help_text="run times, UTC")
