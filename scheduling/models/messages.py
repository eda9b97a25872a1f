"""The scheduled messages, their ordering turns, bulk actions and the broker copies they ride in.
The bulk statements of the messages' table are raw SQL in models/querysets.py."""

from __future__ import annotations

import functools

from django.db import models
from django.utils import timezone
from uuid_utils.compat import uuid7

from scheduling.core.clock import to_epoch_ms
from scheduling.core.lifecycle import IN_FLIGHT_VALUES, LATER_FINISHED_VALUES, ORDER_OPEN_VALUES, Status
from scheduling.db.sql import loaded_instance
from scheduling.models.delivery import Trigger
from scheduling.models.endpoints import FLOW_KEY_MAX_LENGTH, DeliveryMode, Endpoint
from scheduling.models.querysets import ScheduledMessageQuerySet
from scheduling.models.teams import Team
from scheduling.models.versions import TopologyVersion

IN_FLIGHT_SORTED = sorted(IN_FLIGHT_VALUES)  # the partial indexes' condition, in a stable order
LATER_FINISHED_SORTED = sorted(LATER_FINISHED_VALUES)  # message_endpoint_ended's condition


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
    def new(cls, *, endpoint: Endpoint, **values) -> ScheduledMessage:
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
