"""Cascades on the broker: provision and verify them (recording the outcome on TopologyVersion),
and read what is in flight in them (the admin's figures, from the management API)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.utils import timezone

from topology import cascade
from topology.diff import diff_plan, diff_warnings

from ..conf import broker
from ..models import Endpoint, TopologyVersion
from .endpoints import endpoints_bind_all


@dataclass(frozen=True)
class ProvisionResult:
    plan: cascade.Plan
    seconds: float
    recorded: bool
    kept: list[str]  # exchanges kept as another system declared them (a shared broker)


@dataclass(frozen=True)
class Verification:
    problems: list[str]  # missing or mismatched: provision_delays fixes them
    warnings: list[str]  # works, but without a safety net (a delivery exchange shared with NServiceBus)


def _record(version: cascade.Version, **fields) -> bool:
    """Stamp the platform's row only when the cascade is the one it knows (same prefix/levels)."""
    return bool(
        TopologyVersion.objects.filter(
            name=version.name, prefix=version.prefix, levels=version.levels
        ).update(**fields)
    )


def topology_provision(*, version: cascade.Version, url: str | None = None) -> ProvisionResult:
    """Declare the version's whole cascade (idempotent). Raises BrokerUnavailable or
    TopologyConflict with a one-line reason. ``url``: another broker (nothing is recorded)."""
    plan = cascade.cascade_plan(version)
    started = time.monotonic()
    with broker(url).session() as session:
        kept = session.declare(plan)
    recorded = url is None and _record(version, provisioned_at=timezone.now())
    if recorded:  # side by side: every endpoint also receives from this version
        endpoints_bind_all(topology=TopologyVersion.objects.get(name=version.name))
    return ProvisionResult(plan=plan, seconds=time.monotonic() - started, recorded=recorded, kept=kept)


def topology_verify(*, version: cascade.Version, url: str | None = None) -> Verification:
    """Each missing or mismatched piece of the cascade on the broker, as one line (none:
    healthy), and what works with less safety than planned."""
    target = broker(url)
    plan = cascade.cascade_plan(version)
    exchanges, queues, bindings = target.management.listings(target.vhost)
    result = Verification(diff_plan(plan, exchanges, queues, bindings), diff_warnings(plan, exchanges))
    if url is None:
        _record(version, verified_at=timezone.now(), verify_problems=result.problems)
    return result



@dataclass(frozen=True)
class LevelDepth:
    level: int
    queue: str
    ttl_ms: int
    messages: int | None  # None: the queue is missing, or the broker has no statistics yet
    ready: int | None
    unacked: int | None


@dataclass(frozen=True)
class EndpointBinding:
    endpoint: str
    binding_key: str
    is_active: bool
    on_broker: bool


@dataclass(frozen=True)
class InFlight:
    vhost: str
    levels: list[LevelDepth]  # highest level first, like the cascade
    unroutable_queue: str
    unroutable: int | None
    delivery_exchange: str
    bindings: list[EndpointBinding]
    unknown_bindings: list[str]  # keys on the delivery exchange that no endpoint explains
    routing: str  # how the levels route: topic keys (v1, v2) or direct + CC bit keys (v3)

    @property
    def in_cascade(self) -> int:
        return sum(level.messages or 0 for level in self.levels)


def topology_in_flight(version: TopologyVersion) -> InFlight:
    """Queue depths of a version's levels and unroutable queue, and the delivery exchange's
    endpoint bindings, read from the management API (ManagementUnavailable when it is away).
    The broker refreshes these statistics every few seconds, so they lag a little."""
    plan_version, on = version.cascade, broker()
    management, vhost = on.management, on.vhost
    depths = management.queue_depths(vhost)
    delivery = cascade.delivery_exchange(version.prefix)
    bound = {b["routing_key"] for b in management.bindings_from(vhost, delivery) if b["destination_type"] == "queue"}

    def level(number: int) -> LevelDepth:
        name = cascade.level_name(version.prefix, number)
        queue = depths.get(name, {})
        return LevelDepth(number, name, cascade.level_ttl_ms(plan_version, number), queue.get("messages"),
                          queue.get("messages_ready"), queue.get("messages_unacknowledged"))

    unroutable = cascade.unroutable_name(version.prefix)
    bindings = [
        EndpointBinding(name, key, active, key in bound)
        for name, active in Endpoint.objects.order_by("name").values_list("name", "is_active")
        if cascade.carries(plan_version, name)
        for key in [cascade.endpoint_binding_key(plan_version, name)]
    ]
    return InFlight(
        vhost=vhost,
        levels=[level(n) for n in range(version.levels - 1, -1, -1)],
        unroutable_queue=unroutable,
        unroutable=depths.get(unroutable, {}).get("messages"),
        delivery_exchange=delivery,
        bindings=bindings,
        unknown_bindings=sorted(bound - {b.binding_key for b in bindings}),
        routing=plan_version.routing,
    )


def versions_in_flight() -> dict[str, int | None]:
    """Version name -> messages in its level queues (one management call; None if unknown)."""
    on = broker()
    depths = on.management.queue_depths(on.vhost)
    totals = {}
    for version in TopologyVersion.objects.all():
        counts = [depths.get(cascade.level_name(version.prefix, level), {}).get("messages") for level in range(version.levels)]
        known = [c for c in counts if c is not None]
        totals[version.name] = sum(known) if known else None
    return totals
