"""Provision and verify cascades on the broker, recording the outcome on TopologyVersion."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.utils import timezone

from topology import broker as topology_broker
from topology import cascade
from topology.verify import verify_plan

from .. import broker
from ..models import TopologyVersion
from .endpoints import endpoints_bind_all


@dataclass(frozen=True)
class ProvisionResult:
    plan: cascade.Plan
    seconds: float
    recorded: bool


def _record(version: cascade.Version, **fields) -> bool:
    """Stamp the platform's row only when the cascade is the one it knows (same prefix/levels)."""
    return bool(
        TopologyVersion.objects.filter(
            name=version.name, prefix=version.prefix, levels=version.levels
        ).update(**fields)
    )


def topology_provision(*, version: cascade.Version, url: str | None = None) -> ProvisionResult:
    """Declare the version's whole cascade (idempotent). Raises BrokerUnavailable or
    TopologyConflict with a one-line reason."""
    plan = cascade.cascade_plan(version)
    started = time.monotonic()
    with broker.connected(url) as conn:
        topology_broker.declare_plan(conn, plan)
    recorded = url is None and _record(version, provisioned_at=timezone.now())
    if recorded:  # side by side: every endpoint also receives from this version
        endpoints_bind_all(topology=TopologyVersion.objects.get(name=version.name))
    return ProvisionResult(plan=plan, seconds=time.monotonic() - started, recorded=recorded)


def topology_verify(*, version: cascade.Version, url: str | None = None) -> list[str]:
    """Each missing or mismatched piece of the cascade on the broker, as one line; [] is healthy."""
    plan = cascade.cascade_plan(version)
    problems = verify_plan(broker.management(url), broker.vhost(url), plan)
    if url is None:
        _record(version, verified_at=timezone.now(), verify_problems=problems)
    return problems
