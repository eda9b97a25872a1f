"""Endpoints: create, activate/deactivate, and bind their queues on the broker."""

from __future__ import annotations

import logging
import secrets

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from rabbit import BrokerUnavailable, TopologyMissing
from topology import cascade

from .. import selectors
from ..conf import broker, conf
from ..errors import Conflict, Unavailable
from ..models import DeliveryMode, Endpoint, TopologyVersion

log = logging.getLogger(__name__)


def _version(topology: str | TopologyVersion | None) -> TopologyVersion:
    if isinstance(topology, TopologyVersion):
        return topology
    version = selectors.topology_version_get(topology) if topology else selectors.topology_version_default()
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
    rows = list(selectors.topology_versions_provisioned())
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
) -> Endpoint:
    """Validate, bind the queue on the broker, then save: no row exists for an unbound queue."""
    endpoint = Endpoint(
        name=name,
        topology=_version(topology),
        handler=handler,
        handler_target=handler_target or "",
        is_active=is_active,
        delivery_mode=delivery_mode,
    )
    if handler == Endpoint.Handler.WEBHOOK:
        endpoint.webhook_secret = webhook_secret or secrets.token_hex(32)
    endpoint.full_clean()
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
) -> Endpoint:
    """Change where *new* messages go (another version, the timeout manager) or how they are
    handled, with the same validation as creating it. The name never changes (it is the queue
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
        if current.handler == Endpoint.Handler.WEBHOOK and not current.webhook_secret:
            current.webhook_secret = secrets.token_hex(32)
        current.full_clean()
        if moved and current.is_active:
            endpoint_bind(endpoint=current)
        current.save()
    return current


def endpoints_bind_all(*, topology: TopologyVersion) -> int:
    """After provisioning a version, bind every existing endpoint to it (side by side)."""
    return endpoints_bind_on(broker(), topology.cascade)


def endpoints_bind_on(target, version: cascade.Version) -> int:
    """Declare every endpoint's queue on ``target`` (a rabbit.Broker) and bind it on this
    cascade where the cascade can carry its name (transfer_delays prepares another broker with
    it). Returns how many were bound."""
    names = [n for n in Endpoint.objects.values_list("name", flat=True) if cascade.carries(version, n)]
    with target.session() as session:
        for name in names:
            session.declare_queue(cascade.endpoint_queue(name, conf().queue_type))
            session.bind(cascade.endpoint_binding(version, name))
    return len(names)
