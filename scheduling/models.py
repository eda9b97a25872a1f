"""The platform's data. Models hold data and their invariants; writes live in services, and the
messages' bulk statements in raw SQL in messages/queries.py."""

import functools
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator, URLValidator
from django.db import models
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.audit.models import AuditArchiveFile, AuditEvent  # noqa: F401  (registers them)
from scheduling.config.conf import conf, configured_version, setting_name
from scheduling.core.clock import to_epoch_ms
from scheduling.core.flow_gate import MAX_CONCURRENT, MAX_DELIVERIES_PER_SECOND
from scheduling.core.lifecycle import IN_FLIGHT_VALUES, LATER_FINISHED_VALUES, ORDER_OPEN_VALUES, Status
from scheduling.core.ordering import Overlap
from scheduling.delivery.models import EndpointHealth, MessageAttempt, OrphanCopy, Trigger  # noqa: F401  (registers them)
from scheduling.events.models import Event, Subscription  # noqa: F401  (registers them)
from scheduling.messages.queries import ScheduledMessageQuerySet, loaded_instance
from scheduling.notifications.models import NotificationRoute, QuotaWarning  # noqa: F401  (registers them)
from scheduling.retention.listing import ParquetFileListing
from scheduling.schedules import rules
from scheduling.teams.models import ApiKey, Invitation, Membership, Team, default_team_id  # noqa: F401  (registers them)
from topology import cascade

IN_FLIGHT_SORTED = sorted(IN_FLIGHT_VALUES)  # the partial indexes' condition, in a stable order
LATER_FINISHED_SORTED = sorted(LATER_FINISHED_VALUES)  # message_endpoint_ended's condition


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


endpoint_name_validator = RegexValidator(
    cascade.DOTTED_DESTINATION_RE,
    "Use letters, digits, '-' and '_', in words joined by '.' (a '*', '#' or an empty word would break routing).",
    code="invalid_name",
)


class DeliveryMode(models.TextChoices):
    NATIVE = "native", "native (the RabbitMQ cascade)"
    TIMEOUT_MANAGER = "timeout_manager", "timeout manager (waits in the database)"


# An endpoint's flow control (docs/guides/flow-control.md): its own, and per flow_key of its messages.
FLOW_LIMITS = ("max_deliveries_per_second", "max_concurrent", "max_deliveries_per_second_per_key",
               "max_concurrent_per_key")
FLOW_KEY_MAX_LENGTH = 200


class Endpoint(models.Model):
    """A destination of one team: its queue (``<team>--<name>``, or an exact name an operator
    bound) is bound to the delivery exchange of each version that can carry it (``#.<queue>`` on
    v1/v2, the queue itself on v3; a dotted name travels on v3 only). Names are unique within a
    team, queues across the platform."""

    class Handler(models.TextChoices):
        NONE = "none", "none (record delivery only)"
        CELERY_TASK = "celery_task", "run a Celery task with the payload"
        WEBHOOK = "webhook", "POST the payload as signed JSON"
        CELERY_QUEUE = "celery_queue", "a Celery queue: messages are ordinary Celery task messages"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="endpoints", default=default_team_id)
    name = models.CharField(max_length=100, validators=[endpoint_name_validator])
    queue = models.CharField(
        max_length=255, editable=False,
        help_text="the broker queue its messages arrive in, and the destination their routing keys name")
    topology = models.ForeignKey(TopologyVersion, on_delete=models.PROTECT, related_name="endpoints")
    handler = models.CharField(max_length=16, choices=Handler.choices, default=Handler.NONE)
    delivery_mode = models.CharField(
        max_length=16, choices=DeliveryMode.choices, default=DeliveryMode.NATIVE,
        help_text="timeout manager: rows wait in the database and are published when due (the "
        "fallback where the cascade cannot be provisioned)",
    )
    handler_target = models.CharField(
        max_length=500, blank=True, help_text="Celery task name, or the webhook's URL"
    )
    # whsec_<base64 key> (Standard Webhooks), encrypted at rest (security/secret_box.py)
    webhook_secret = models.CharField(max_length=512, blank=True, editable=False)
    webhook_secret_previous = models.CharField(
        max_length=512, blank=True, editable=False,
        help_text="the secret before the last rotation: signatures with it stay valid until the time below")
    webhook_secret_previous_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    is_active = models.BooleanField(default=True)
    # Flow control (docs/guides/flow-control.md): kept by the delivery loops of every worker together.
    max_deliveries_per_second = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(MAX_DELIVERIES_PER_SECOND)],
        help_text="hand-overs in any one second, across all workers; over it, messages wait (empty: no limit)")
    max_concurrent = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENT)],
        help_text="webhook calls in flight at once, across all workers (empty: no limit)")
    # Flow control by key (0032): the same limits per message flow_key, on top of the endpoint's own.
    # Nullable, no default: adding them rewrites nothing, and the previous release's INSERTs skip them.
    max_deliveries_per_second_per_key = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(MAX_DELIVERIES_PER_SECOND)],
        help_text="hand-overs in any one second per flow_key of its messages, across all workers (empty: no limit)")
    max_concurrent_per_key = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENT)],
        help_text="webhook calls in flight at once per flow_key of its messages, across all workers (empty: no limit)")
    webhook_timeout_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.1)],
        help_text="one deadline over each webhook call (connect, send, answer), up to the platform's "
        "maximum (empty: the platform's deadline)")
    disabled_at = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="when the platform disabled it for failing too long (its messages are kept; enable it to resume)")
    disabled_reason = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="one_endpoint_name_per_team"),
            models.UniqueConstraint(fields=["queue"], name="one_endpoint_per_queue"),
            models.CheckConstraint(condition=~models.Q(queue=""), name="endpoint_has_a_queue"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        errors = {}
        if self.handler in (self.Handler.CELERY_TASK, self.Handler.WEBHOOK) and not self.handler_target:
            errors["handler_target"] = f"required for the {self.handler} handler"
        if self.handler == self.Handler.WEBHOOK and self.handler_target:
            try:
                URLValidator(schemes=["http", "https"])(self.handler_target)
            except ValidationError:
                errors["handler_target"] = "must be an http(s) URL"
        if self.handler in (self.Handler.NONE, self.Handler.CELERY_QUEUE) and self.handler_target:
            errors["handler_target"] = f"must be empty for the {self.handler} handler"
        if self.topology_id and self.name and cascade.DOTTED_DESTINATION_RE.match(self.name):
            if not cascade.carries(self.topology.cascade, self.name):
                errors["topology"] = (
                    f"{self.topology.name} cannot carry the dotted name {self.name!r}: it binds '#.<name>', "
                    f"which another endpoint's binding could share; use a direct-routing version (v3)"
                )
        if self.handler == self.Handler.CELERY_QUEUE:
            for name in FLOW_LIMITS:
                if getattr(self, name) is not None:
                    errors[name] = "a Celery queue's messages go to its own workers: limit them there"
        elif self.handler != self.Handler.WEBHOOK:
            for name in ("max_concurrent", "max_concurrent_per_key"):
                if getattr(self, name) is not None:
                    errors[name] = "applies to webhook endpoints only (a Celery task's concurrency is its workers')"
        if self.webhook_timeout_seconds is not None:
            longest = conf().webhook_timeout_max_seconds
            if self.handler != self.Handler.WEBHOOK:
                errors["webhook_timeout_seconds"] = "applies to webhook endpoints only"
            elif self.webhook_timeout_seconds > longest:
                errors["webhook_timeout_seconds"] = (f"at most {longest:g} s "
                                                     f"({setting_name('webhook_timeout_max_seconds')})")
        if errors:
            raise ValidationError(errors)


class EndpointFlow(models.Model):
    """An endpoint's rate slots: the next free slot, in microseconds of the database's clock. Its
    own table, not a column of the endpoint: a form saving a whole endpoint row would write an old
    slot back and let a burst through (scheduling/delivery/flow_slots.py)."""

    endpoint = models.OneToOneField(Endpoint, on_delete=models.CASCADE, primary_key=True, related_name="flow")
    next_slot_us = models.BigIntegerField()


class EndpointKeyFlow(models.Model):
    """A flow key's rate slots on one endpoint (max_deliveries_per_second_per_key), as EndpointFlow
    is the endpoint's. A row per key that was limited lately: the statement that takes a key's
    slots deletes, in the same turn, the endpoint's rows whose slot is long past (a bound on the
    table: the keys of the last minute or so, delivery/flow_slots.py)."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=FLOW_KEY_MAX_LENGTH)
    next_slot_us = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "key"], name="one_key_flow_per_endpoint_key")]


class ScheduledMessage(models.Model):
    """One message to deliver at ``due_at``. The row is the outbox: saved ``pending`` first,
    published by the relay, and marked on arrival by the delivery consumer."""

    Status = Status  # the lifecycle's statuses (scheduling/core/lifecycle.py)

    # UUIDv7: time-ordered, so new rows extend the primary key's index at its right edge instead of
    # touching a random page of it (rows from before keep their v4 ids; docs/operations/performance.md).
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # No single-column indexes on the two keys: (endpoint, status) serves endpoint lookups, and
    # every index is written again at each status change (pending, published, delivered).
    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, related_name="messages", db_index=False)
    topology = models.ForeignKey(TopologyVersion, on_delete=models.PROTECT, related_name="messages", db_index=False)
    # Copied from the endpoint when scheduled: the relay publishes only native rows, the timeout
    # manager only its own, so no row can be published by both (migrate_timeouts flips it).
    delivery_mode = models.CharField(max_length=16, choices=DeliveryMode.choices, default=DeliveryMode.NATIVE)
    payload = models.JSONField()
    due_at = models.DateTimeField(db_index=True)
    requested_delay_ms = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=[(s.value, s.name.title()) for s in Status],
                              default=Status.PENDING.value)
    routing_key = models.CharField(max_length=255, blank=True)
    first_exchange = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    published_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivered_by = models.CharField(max_length=255, blank=True, default="",
                                    help_text="the worker that received the message (its Celery node name)")
    cancelled_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="delivered, cancelled or failed at; the retention counts from here")
    lateness_ms = models.BigIntegerField(null=True, blank=True)
    throttled_ms = models.BigIntegerField(
        null=True, blank=True, help_text="of its lateness, how long it waited for its endpoint's flow control")
    delivery_count = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0, help_text="handler attempts that failed")
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    last_error = models.TextField(blank=True)
    # The key of the recurring schedule that made it, copied (not a foreign key): a schedule's
    # history stays listable after it is deleted, and the archive keeps it as text.
    schedule = models.CharField(max_length=200, null=True, blank=True,
                                help_text="the recurring schedule whose run this is")
    due_history = models.JSONField(
        null=True, blank=True, help_text="earlier due times, oldest first, each with when it was moved (reschedule)")
    # A webhook call in flight: the worker that took the row for its call holds it until then (the
    # call's deadline and a margin); a copy arriving meanwhile waits, and once it has passed (the
    # worker died mid-call) the next copy calls again: at least once. Not indexed (HOT updates).
    call_lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULED,
                               help_text="why its next attempt is made (a person's republish or resend: manual)")
    # What the team's bytes quota sums (teams/quotas.py): set when scheduled; empty on rows from
    # before it, which the count measures from the payload instead.
    # A plain integer: a positive one's CHECK would make adding the column scan the whole table.
    payload_bytes = models.IntegerField(null=True, blank=True, editable=False,
                                        help_text="its payload's JSON, in bytes")
    # The payload is a Celery task message as apply_async built it ({"celery": ...}), captured by the
    # platform itself (DelayedTask: celery/services.py): only such a row is published as it was
    # captured (wire.outgoing_task). Set when the row is made, never read from the payload's shape.
    # NULL: made by a release before this column (0023), inferred as that release did
    # (wire.legacy_captured); a later contract release may backfill it and make it NOT NULL.
    captured_task = models.BooleanField(
        null=True, blank=True, editable=False,
        help_text="a Celery task message the platform captured (DelayedTask), published as captured")

    # The W3C traceparent the message continues (docs/observability/tracing.md): the caller's, or with
    # tracing on the platform's schedule span in the caller's trace. NULL: none was given (and
    # tracing is off), or a row from before this column (0026). Nullable, no default: adding it
    # rewrites nothing.
    traceparent = models.CharField(
        max_length=55, null=True, blank=True, editable=False,
        help_text="the W3C traceparent it was scheduled under, carried to its delivery")

    # Fan-out and notifications (issue 48; 0028): nullable, no constraint added with the column (the
    # previous release's INSERTs do not name them, and a REFERENCES would read the table under lock);
    # each has a partial index (0029, built CONCURRENTLY) that rows without one never enter.
    event = models.ForeignKey("scheduling.Event", on_delete=models.PROTECT, null=True, blank=True,
                              db_index=False, db_constraint=False, related_name="messages",
                              help_text="the event whose fan-out made it (docs/guides/events.md)")
    on_delivered = models.ForeignKey(
        Endpoint, on_delete=models.PROTECT, null=True, blank=True, db_index=False, db_constraint=False,
        related_name="+", help_text="the team's endpoint that gets its outcome record once delivered")
    on_failed = models.ForeignKey(
        Endpoint, on_delete=models.PROTECT, null=True, blank=True, db_index=False, db_constraint=False,
        related_name="+", help_text="the team's endpoint that gets its outcome record once failed")
    notification = models.CharField(
        max_length=32, null=True, blank=True, editable=False,
        help_text="the notification or callback type it carries (made by the platform; never notified about)")

    # Expiry (issue 49; 0030): never handed over from then on, it ends expired. Nullable, no default:
    # adding it rewrites nothing and the previous release's INSERTs leave it NULL (never expires).
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="not handed over from then on: it ends expired (empty: never expires)")
    # Debounce (issue 49; 0031; core/debounce.py): the key a newer message of the endpoint replaces
    # this one by (trailing) or is dropped by (leading), and the end of its window (trailing: the
    # cap, carried from row to row; leading: when the next message opens a new window). Nullable,
    # no default: adding them rewrites nothing; rows without a key never enter their indexes.
    debounce_key = models.CharField(max_length=200, null=True, blank=True, editable=False,
                                    help_text="its debounce key (per endpoint)")
    debounce_mode = models.CharField(max_length=8, null=True, blank=True, editable=False,
                                     help_text="trailing or leading")
    debounce_seconds = models.IntegerField(null=True, blank=True, editable=False,
                                           help_text="trailing: due this long after the newest; leading: the window")
    debounce_max_seconds = models.IntegerField(null=True, blank=True, editable=False,
                                               help_text="trailing: never later than this after the window's first")
    debounce_until = models.DateTimeField(null=True, blank=True, editable=False,
                                          help_text="trailing: the window's cap; leading: the window's end")
    # Flow control by key (0032; docs/guides/flow-control.md "By key"): its endpoint's per-key limits
    # count it with the messages of the same key. Nullable, no default: adding it rewrites nothing.
    flow_key = models.CharField(
        max_length=FLOW_KEY_MAX_LENGTH, null=True, blank=True, editable=False,
        help_text="its flow key: the endpoint's per-key limits count it with the messages of the same key")
    # Ordering (issue 49; 0034; core/ordering.py): messages of the endpoint with the same key are handed
    # over one at a time in due order. Nullable, no default: rows without a key never enter its indexes.
    ordering_key = models.CharField(max_length=200, null=True, blank=True, editable=False,
                                    help_text="handed over one at a time, in due order, with the endpoint's "
                                              "other messages of this key")
    waiting_since = models.DateTimeField(null=True, blank=True, editable=False,
                                         help_text="when it first waited for its ordering key's turn")
    # A recurring schedule's run (0035): its schedule's overlap policy (skip or buffer_one; core/ordering.py),
    # set with its platform ordering key. Nullable, no default: every other row leaves it NULL.
    overlap = models.CharField(max_length=12, null=True, blank=True, editable=False,
                               help_text="a schedule's run: what it does when the previous run has not ended")

    objects = ScheduledMessageQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="unique_idempotency_key_per_endpoint",
            )
        ]
        # Lists read newest first through these (selectors.database.message_get_page merges one index range
        # per status, or per endpoint x status x version, instead of sorting the table): with
        # 50 M rows, no page may sort or count the history (docs/operations/performance.md, "History").
        indexes = [
            models.Index(fields=["status", "created_at"], name="message_status_created"),
            # Two partial indexes, one over the messages in flight and one over the finished:
            # each a range per endpoint x status x version in (created_at, id) order for an
            # endpoint's and a version's lists, read index-only (with the heap to visit, PostgreSQL
            # prefers (status, created_at) and a filter, and reads a whole status for a version the
            # endpoint never used: with 200,000 messages in flight for another endpoint, the
            # in-flight part of a list takes 163 ms on a plain (endpoint, status) index).
            models.Index(fields=["endpoint", "status", "topology", "created_at", "id"], name="message_endpoint_in_flight",
                         condition=models.Q(status__in=IN_FLIGHT_SORTED)),
            models.Index(fields=["endpoint", "status", "topology", "created_at", "id"], name="message_endpoint_history",
                         condition=models.Q(status__in=["cancelled", "delivered", "failed"])),
            # the same for the final statuses added since (expired, superseded; 0030, CONCURRENTLY):
            # the history index's condition stays as built, by value, and the lists read both
            models.Index(fields=["endpoint", "status", "topology", "created_at", "id"], name="message_endpoint_ended",
                         condition=models.Q(status__in=LATER_FINISHED_SORTED)),
            models.Index(
                fields=["due_at"], name="message_timeouts_due",
                condition=models.Q(status="pending", delivery_mode="timeout_manager"),
            ),
            # a team's messages in flight and their payload bytes, read index-only per endpoint by
            # its in-flight quotas (teams/quotas.py): 0.6 ms for a team with 2,000 in flight in a
            # table of 200,000, 25 ms with 60,000 (reading the heap instead: 60 to 120 ms for either,
            # the planner taking every team's in-flight rows; docs/guides/teams.md#quotas)
            models.Index(fields=["endpoint", "status"], include=["payload_bytes"], name="message_in_flight_bytes",
                         condition=models.Q(status__in=IN_FLIGHT_SORTED)),
            # overdue and due soon, among the messages in flight only (the dashboard)
            models.Index(fields=["due_at"], name="message_in_flight_due",
                         condition=models.Q(status__in=IN_FLIGHT_SORTED)),
            # scheduled in the past: a few rows, none for a message asked for a time to come
            models.Index(fields=["created_at"], name="message_in_past_created",
                         condition=models.Q(due_at__lt=models.F("created_at"))),
            # a schedule's runs by status, newest first (GET /api/messages/?schedule=; its runs in flight)
            models.Index(fields=["schedule", "status", "created_at", "id"], name="message_schedule_runs",
                         condition=models.Q(schedule__isnull=False)),
            # an event's messages (GET /api/events/<id>/, its cancel); rows of no event never enter it
            models.Index(fields=["event", "created_at"], name="message_event",
                         condition=models.Q(event__isnull=False)),
            # what an endpoint's deletion asks (no row may name it as its callback)
            models.Index(fields=["on_delivered"], name="message_on_delivered",
                         condition=models.Q(on_delivered__isnull=False)),
            models.Index(fields=["on_failed"], name="message_on_failed",
                         condition=models.Q(on_failed__isnull=False)),
            # the waiting message of (endpoint, debounce key) that a trailing one replaces, and the
            # leading windows still open: rows without a key never enter either (0031, CONCURRENTLY)
            models.Index(fields=["endpoint", "debounce_key"], name="message_debounce_waiting",
                         condition=models.Q(debounce_key__isnull=False, status__in=IN_FLIGHT_SORTED)),
            models.Index(fields=["endpoint", "debounce_key", "debounce_until"], name="message_debounce_leading",
                         condition=models.Q(debounce_mode="leading")),
            # an ordering key's open messages in turn order: "an earlier one is open", "the next one"
            models.Index(fields=["endpoint", "ordering_key", "due_at", "created_at", "id"], name="message_ordering",
                         condition=models.Q(ordering_key__isnull=False,
                                            status__in=sorted(ORDER_OPEN_VALUES))),
            # the waiting messages (the sweep's keys; the team's quota and the dashboard count them)
            models.Index(fields=["endpoint", "ordering_key"], include=["payload_bytes"], name="message_waiting",
                         condition=models.Q(status="waiting")),
        ]
        permissions = [
            ("cancel_scheduledmessage", "Can cancel scheduled messages"),
            ("republish_scheduledmessage", "Can republish failed messages"),
        ]

    def __str__(self) -> str:
        return f"{self.id} → {self.endpoint_id} at {self.due_at:%Y-%m-%d %H:%M:%S.%f}"[:-3]

    @classmethod
    def new(cls, *, endpoint: Endpoint, **values) -> "ScheduledMessage":
        """A new row for ``insert_many`` (its topology is the endpoint's), with every other field at
        its default: keyword ``__init__`` cost ~32 µs a row, a third of a bulk request."""
        constant, computed, db = cls._new_defaults()
        defaults = {f.attname: f.get_default() for f in computed if f.attname not in values}
        row = loaded_instance(cls, db, {**constant, **defaults, **values,
                                        "endpoint_id": endpoint.pk, "topology_id": endpoint.topology_id})
        row._state.fields_cache.update(endpoint=endpoint, topology=endpoint.topology)
        return row

    @classmethod
    @functools.cache
    def _new_defaults(cls) -> tuple[dict, list, str]:
        """Each field's default once: constants as values, callables (id, created_at) to call per
        row; and the database (the manager's lookup cost ~4 µs a row)."""
        fields = cls._meta.concrete_fields
        computed = [f for f in fields if f.has_default() and callable(f.default)]
        return {f.attname: f.get_default() for f in fields if f not in computed}, computed, cls.objects.db

    @property
    def due_at_ms(self) -> int:
        return to_epoch_ms(self.due_at)


schedule_key_validator = RegexValidator(
    r"^[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*$",
    "Use letters, digits, '-' and '_', in words joined by '.' or ':'.", code="invalid_key",
)


class OrderingTurn(models.Model):
    """One row per (endpoint, ordering key): what the hand-overs of the key lock, one key at a time
    (no global lock), and the message whose webhook call may still be out (``holder``) until its
    lease: a successor never overlaps it, even once the holder was cancelled."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=200)
    holder_id = models.UUIDField(null=True, blank=True)
    holder_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "key"], name="ordering_turn_key")]
        indexes = [models.Index(fields=["holder_until"], name="ordering_turn_held",
                                condition=models.Q(holder_id__isnull=False))]

    def __str__(self) -> str:
        return f"{self.endpoint_id}/{self.key}"


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
    def rule(self) -> rules.Rule:
        return rules.Rule(cron=self.cron, tz=self.timezone, interval_ms=self.interval_ms,
                               anchor=self.anchor_at, start=self.start_at, end=self.end_at)

    def upcoming(self, now, count: int = 1) -> list:
        """The next ``count`` runs after ``now``, UTC; none while paused (what the API's
        next_run_at and the admin's next runs show)."""
        return [] if self.is_paused else rules.preview(self.rule, after=now, count=count)

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
        return run_at + timedelta(milliseconds=rules.jitter_offset_ms(
            seed=f"{self.team_id}:{self.key}", run_at=run_at, jitter_ms=self.jitter_ms))


class FailedMessage(ScheduledMessage):
    """The dead letters: failed messages, each with its last error (the admin's own list of them)."""

    class Meta:
        proxy = True
        verbose_name = "failed message (dead letter)"
        verbose_name_plural = "failed messages (dead letters)"


class BulkAction(models.Model):
    """One cancel or republish of every message matching filters (API, admin): done in batches of
    a short transaction each; ``done`` grows as they commit, which is the admin's progress."""

    class Kind(models.TextChoices):
        CANCEL = "cancel", "cancel"
        REPUBLISH = "republish", "republish"

    class State(models.TextChoices):
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="bulk_actions",
                             help_text="the team whose messages it changed (empty: every team's, an operator's)")
    filters = models.JSONField(help_text="what the messages matched (API names)")
    matched = models.PositiveBigIntegerField(help_text="messages matching when it started")
    done = models.PositiveBigIntegerField(default=0, help_text="messages cancelled or republished so far")
    refused = models.PositiveBigIntegerField(
        default=0, db_default=0, help_text="messages not republished: their team's in-flight quota was full")
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    requested_by = models.CharField(max_length=150, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.done:,}/{self.matched:,}"


class CascadeCopy(models.Model):
    """A copy of a message still travelling the cascade after the message was cancelled or moved
    (rescheduled): the broker keeps it until its old due time, when the consumer drops it. It
    counts toward its team's in-flight quotas until then (teams/quotas.py); the prune removes it
    after. Not linked to the message: the row may be pruned before the copy leaves."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, db_index=False, related_name="+")
    message_id = models.UUIDField()
    until = models.DateTimeField(help_text="the copy's due time: it leaves the broker then")
    payload_bytes = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["team", "until"], name="cascade_copy_team_until")]

    def __str__(self) -> str:
        return f"copy of {self.message_id} until {self.until:%Y-%m-%d %H:%M:%S}"


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
