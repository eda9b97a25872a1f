"""Endpoints: create, activate/deactivate, and bind their queues on the broker."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from rabbit import BrokerUnavailable, TopologyMissing
from topology import cascade

from ..conf import broker, conf
from ..errors import Conflict, Unavailable
from ..models import DeliveryMode, Endpoint, TopologyVersion
from ..security import guards, webhook_signing
from ..selectors.database import (
    topology_version_get,
    topology_version_get_default,
    topology_version_list_provisioned,
)

log = logging.getLogger(__name__)

MAX_SECRET_OVERLAP_SECONDS = 30 * 86400  # how long a rotated-out secret may keep signing


UNCHANGED = object()  # endpoint_update: a limit not given (None is "no limit")


def _version(topology: str | TopologyVersion | None) -> TopologyVersion:
    if isinstance(topology, TopologyVersion):
        return topology
    version = topology_version_get(name=topology) if topology else topology_version_get_default()
    if version is None:
        raise ValidationError({"topology": f"unknown topology version {topology!r}"})
    return version


def _carrying(rows, name: str) -> list[cascade.Version]:
    """The cascades of these versions that can deliver to ``name`` (a dotted name: direct only)."""
    return [v for v in {row.cascade for row in rows} if cascade.carries(v, name)]


def endpoint_bind(*, endpoint: Endpoint) -> list[str]:
    """Declare the endpoint's queue and bind it on every provisioned version's delivery
    exchange that can carry its name (``#.<name>`` on v1/v2, ``<name>`` on v3), so senders on
    any version reach it. A native endpoint also needs its own version's cascade; a
    timeout-manager endpoint needs only its queue. Returns the prefixes."""
    rows = list(topology_version_list_provisioned())
    if endpoint.delivery_mode == DeliveryMode.NATIVE:
        rows.append(endpoint.topology)
    versions = sorted(_carrying(rows, endpoint.name), key=lambda v: v.prefix)
    try:
        with broker().session() as session:
            session.declare_queue(cascade.endpoint_queue(endpoint.name, conf().queue_type))
            for version in versions:
                session.bind(cascade.endpoint_binding(version, endpoint.name))
    except BrokerUnavailable as exc:
        raise Unavailable(f"cannot bind endpoint {endpoint.name!r}: {exc}") from None
    except TopologyMissing as exc:
        raise Conflict(
            f"cannot bind endpoint {endpoint.name!r}: {exc}; provision the cascade first "
            f"(manage.py provision_delays --version {endpoint.topology.name})"
        ) from None
    return [v.prefix for v in versions]


def _check_handler(endpoint: Endpoint) -> None:
    """What the handler would reach, by the guards (no webhook into the platform's own network,
    only allowed Celery tasks); the worker checks again when it sends."""
    settings = conf()
    why = None
    if endpoint.handler == Endpoint.Handler.WEBHOOK:
        why = guards.webhook_url_refusal(endpoint.handler_target, settings.webhook_allowed_networks)
    elif endpoint.handler == Endpoint.Handler.CELERY_TASK:
        why = guards.task_refusal(endpoint.handler_target, settings.celery_task_allowlist)
    if why:
        raise ValidationError({"handler_target": why})


def _new_secret(given: str | None, *, field: str) -> str:
    """A given secret in the Standard Webhooks format, or a generated one."""
    if not given:
        return webhook_signing.generate_secret()
    problem = webhook_signing.secret_problem(given)
    if problem:
        raise ValidationError({field: problem})
    return given


def _refresh_consumers(name: str) -> None:
    """Ask running workers' delivery loops to follow the endpoint table now (they also re-read
    it every few seconds, so a lost broadcast only delays this)."""
    try:
        current_app.control.broadcast("dp_sync_endpoints", reply=False)
    except Exception as exc:
        log.warning("could not broadcast the endpoint change for %s: %s", name, exc)


def endpoint_create(
    *,
    name: str,
    topology: str | TopologyVersion | None = None,
    handler: str = Endpoint.Handler.NONE,
    handler_target: str = "",
    webhook_secret: str | None = None,
    is_active: bool = True,
    delivery_mode: str = DeliveryMode.NATIVE,
    max_deliveries_per_second: int | None = None,
    max_concurrent: int | None = None,
) -> Endpoint:
    """Validate, bind the queue on the broker, then save: no row exists for an unbound queue.
    A webhook endpoint's secret (``whsec_...``) is generated unless given; the caller shows it
    once, from the returned row."""
    endpoint = Endpoint(
        name=name,
        topology=_version(topology),
        handler=handler,
        handler_target=handler_target or "",
        is_active=is_active,
        delivery_mode=delivery_mode,
        max_deliveries_per_second=max_deliveries_per_second,
        max_concurrent=max_concurrent,
    )
    if handler == Endpoint.Handler.WEBHOOK:
        endpoint.webhook_secret = _new_secret(webhook_secret, field="webhook_secret")
    endpoint.full_clean()
    _check_handler(endpoint)
    endpoint_bind(endpoint=endpoint)
    try:
        with transaction.atomic():
            endpoint.save()
    except IntegrityError:  # created concurrently since full_clean
        raise ValidationError({"name": "Endpoint with this Name already exists."}) from None
    transaction.on_commit(lambda: _refresh_consumers(endpoint.name))
    return endpoint


def endpoint_set_active(*, endpoint: Endpoint, active: bool) -> Endpoint:
    """Deactivating pauses delivery (messages wait in the queue) and refuses new schedules;
    activating re-binds the queue and resumes consumption."""
    if active:
        endpoint_bind(endpoint=endpoint)
    endpoint.is_active = active
    endpoint.save(update_fields=["is_active", "updated_at"])
    transaction.on_commit(lambda: _refresh_consumers(endpoint.name))
    return endpoint


def endpoint_update(
    *,
    endpoint: Endpoint,
    topology: str | TopologyVersion | None = None,
    delivery_mode: str | None = None,
    handler: str | None = None,
    handler_target: str | None = None,
    max_deliveries_per_second: int | None | object = UNCHANGED,
    max_concurrent: int | None | object = UNCHANGED,
) -> Endpoint:
    """Change where *new* messages go (another version, the timeout manager), how they are
    handled, or its flow control (None: no limit; the workers follow within
    DELAY_CONSUMER_SYNC_SECONDS, at once when the broadcast reaches them), with the same
    validation as creating it. The name never changes (it is the queue
    and its binding). Messages already scheduled keep theirs; the queue receives from every
    provisioned version, so nothing in flight is stranded. Moving an active endpoint binds its
    queue on the new version before the row says so."""
    with transaction.atomic():
        current = Endpoint.objects.select_for_update().select_related("topology").get(pk=endpoint.pk)
        version = current.topology if topology is None else _version(topology)
        moved, current.topology = version.pk != current.topology_id, version
        if delivery_mode is not None and delivery_mode != current.delivery_mode:
            moved, current.delivery_mode = True, delivery_mode
        if handler is not None:
            current.handler = handler
        if handler_target is not None:
            current.handler_target = handler_target
        flow_changed = False
        for name, value in (("max_deliveries_per_second", max_deliveries_per_second),
                            ("max_concurrent", max_concurrent)):
            if value is not UNCHANGED and value != getattr(current, name):
                setattr(current, name, value)
                flow_changed = True
        if current.handler == Endpoint.Handler.WEBHOOK and not current.webhook_secret:
            current.webhook_secret = webhook_signing.generate_secret()
        current.full_clean()
        _check_handler(current)
        if moved and current.is_active:
            endpoint_bind(endpoint=current)
        current.save()
    if flow_changed:
        transaction.on_commit(lambda: _refresh_consumers(current.name))
    return current


def endpoint_rotate_secret(*, endpoint: Endpoint, secret: str | None = None,
                           previous_valid_seconds: int = 86400) -> Endpoint:
    """Give a webhook endpoint a new signing secret (generated unless given). The current one
    keeps signing beside it for ``previous_valid_seconds`` (0: retired at once), so receivers
    switch without a gap; a secret rotated out earlier stops at once. The caller shows the new
    secret once, from the returned row."""
    if isinstance(previous_valid_seconds, bool) or not isinstance(previous_valid_seconds, int) or \
            not 0 <= previous_valid_seconds <= MAX_SECRET_OVERLAP_SECONDS:
        raise ValidationError({"previous_valid_seconds": f"must be a whole number of seconds from 0 to "
                                                         f"{MAX_SECRET_OVERLAP_SECONDS:,} (30 days)"})
    new = _new_secret(secret, field="secret")
    with transaction.atomic():
        current = Endpoint.objects.select_for_update().get(pk=endpoint.pk)
        if current.handler != Endpoint.Handler.WEBHOOK:
            raise ValidationError({"handler": f"only webhook endpoints sign with a secret; this one is {current.handler}"})
        if new == current.webhook_secret:
            raise ValidationError({"secret": "is the current secret; give a new one or leave it out"})
        overlap = previous_valid_seconds > 0 and bool(current.webhook_secret)
        current.webhook_secret_previous = current.webhook_secret if overlap else ""
        current.webhook_secret_previous_expires_at = (
            timezone.now() + timedelta(seconds=previous_valid_seconds) if overlap else None)
        current.webhook_secret = new
        current.save(update_fields=["webhook_secret", "webhook_secret_previous", "webhook_secret_previous_expires_at",
                                    "updated_at"])
    log.info("webhook secret of endpoint %s rotated; the previous one signs until %s", current.name,
             current.webhook_secret_previous_expires_at or "now")
    return current


def endpoint_bind_all(*, topology: TopologyVersion) -> int:
    """After provisioning a version, bind every existing endpoint to it (side by side)."""
    return endpoint_bind_all_on(target=broker(), version=topology.cascade)


def endpoint_bind_all_on(*, target, version: cascade.Version) -> int:
    """Declare every endpoint's queue on ``target`` (a rabbit.Broker) and bind it on this
    cascade where the cascade can carry its name (transfer_delays prepares another broker with
    it). Returns how many were bound."""
    names = [n for n in Endpoint.objects.values_list("name", flat=True) if cascade.carries(version, n)]
    with target.session() as session:
        for name in names:
            session.declare_queue(cascade.endpoint_queue(name, conf().queue_type))
            session.bind(cascade.endpoint_binding(version, name))
    return len(names)
