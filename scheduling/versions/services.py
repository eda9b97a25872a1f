"""Cascades on the broker: declare and provision them, and verify them (recording the outcome on
TopologyVersion). A version of k shards is k cascades: each is declared and verified. What is in
flight in them, and the check itself, are reads: versions/broker.py."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.utils import timezone

import rabbit
from rabbit.redelivery import redelivery_policy_ensure
from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import broker, conf
from scheduling.models import Endpoint, TopologyVersion
from scheduling.versions.broker import Verification, topology_check
from topology import cascade


@dataclass(frozen=True)
class ProvisionResult:
    plan: cascade.Plan
    seconds: float
    recorded: bool
    kept: list[str]  # exchanges kept as another system declared them (a shared broker)
    redelivery_policy: str = ""  # the broker version that needed the delivery-limit policy ("": none did)


def _record(version: cascade.Version, **fields) -> bool:
    """Stamp the platform's row only when the cascade is the one it knows (same prefix/levels)."""
    return bool(
        TopologyVersion.objects.filter(
            name=version.name, prefix=version.prefix, levels=version.levels
        ).update(**fields)
    )


def topology_declare(*, session: rabbit.Session, version: cascade.Version) -> list[str]:
    """Declare every shard of the version, shard 0 first (it holds the delivery exchange the
    others pass into), and on a version with envelopes the fan-out queue and its binding (idempotent:
    one queue, bound on every such version). Shard s's queues are declared from node s on, so on a
    cluster the same level of different shards has its quorum leader on a different node. Returns the lines of
    exchanges kept as another system declared them."""
    kept = []
    for shard, plan in enumerate(cascade.shard_plans(version)):
        kept += session.declare(plan, first_node=shard)
    if version.envelopes:  # events' one copy arrives in the fan-out queue (docs/concepts/fan-out.md)
        session.declare_queue(cascade.fanout_queue(conf().queue_type))
        session.bind(cascade.fanout_binding(version))
    return kept


def topology_provision(*, version: cascade.Version, url: str | None = None) -> ProvisionResult:
    """Declare the version's whole cascade, every shard (idempotent), and on RabbitMQ 4.x the
    vhost's policy against quorum queues' delivery limit (rabbit/redelivery.py). Raises
    BrokerUnavailable, TopologyConflict or ManagementUnavailable with a one-line reason. ``url``: another broker (nothing is recorded).
    Shards beyond the version's count are left as they are: verify reports them."""
    plan = cascade.cascade_plan(version)
    started = time.monotonic()
    target = broker(url)
    with target.session() as session:
        kept = topology_declare(session=session, version=version)
        server_version = session.server_version
    # 4.x drops a quorum queue's message handed back 20 times: not in the platform's vhost
    policy = redelivery_policy_ensure(management=target.management, vhost=target.vhost, version=server_version)
    recorded = url is None and _record(version, provisioned_at=timezone.now(), shards=version.shards)
    audit_record(action=actions.TOPOLOGY_PROVISION, object_type="topologyversion", object_id=version.name,
                 object_repr=version.name, after={"prefix": version.prefix, "levels": version.levels,
                                                  "shards": version.shards, "broker": "another" if url else "the platform's"})
    if recorded:  # side by side: every endpoint also receives from this version
        endpoint_bind_all(topology=TopologyVersion.objects.get(name=version.name))
    return ProvisionResult(plan=plan, seconds=time.monotonic() - started, recorded=recorded, kept=kept,
                           redelivery_policy=server_version if policy else "")


def topology_verify(*, version: cascade.Version, url: str | None = None) -> Verification:
    """Check the version's cascade on the broker (topology_check: every missing or mismatched
    piece, each quorum queue not replicated to every running node, the warnings, the quorum
    leaders) and, on the platform's own broker, record the outcome on its TopologyVersion row."""
    result = topology_check(version=version, url=url)
    if url is None:
        _record(version, verified_at=timezone.now(), verify_problems=result.problems)
    return result


def endpoint_bind_all(*, topology: TopologyVersion) -> int:
    """After provisioning a version, bind every existing endpoint to it (side by side)."""
    return endpoint_bind_all_on(target=broker(), version=topology.cascade)


def endpoint_bind_all_on(*, target, version: cascade.Version) -> int:
    """Declare every endpoint's queue on ``target`` (a rabbit.Broker) and bind it on this
    cascade where the cascade can carry its name (transfer_delays prepares another broker with
    it). Returns how many were bound."""
    names = [n for n in Endpoint.objects.values_list("queue", flat=True) if cascade.carries(version, n)]
    with target.session() as session:
        for name in names:
            session.declare_queue(cascade.endpoint_queue(name, conf().queue_type))
            session.bind(cascade.endpoint_binding(version, name))
    return len(names)
