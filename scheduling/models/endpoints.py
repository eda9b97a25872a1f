"""Endpoints: where messages go (a webhook or a Celery queue), with their flow limits."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator, URLValidator
from django.db import models

from scheduling.config.conf import conf, setting_name
from scheduling.core.flow_gate import MAX_CONCURRENT, MAX_DELIVERIES_PER_SECOND
from scheduling.models.teams import Team, default_team_id
from scheduling.models.versions import TopologyVersion
from topology import cascade

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
