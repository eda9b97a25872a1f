"""Reads of the broker (the management API and passive declares, through rabbit/): whether a
version's cascade is as planned, what is in flight in it (the admin's figures and the metrics'),
and how many messages wait in its level queues (what a move starts with). Nothing here writes:
declaring, provisioning and moving are services (versions/services.py, moves/delays.py). The
figures lag a little: the broker refreshes its statistics every few seconds."""

from __future__ import annotations

from dataclasses import dataclass, field

import rabbit
from rabbit.requirements import Requirement, broker_facts, requirements_check
from scheduling.config.conf import broker, conf
from scheduling.models import Endpoint, TopologyVersion
from topology import cascade
from topology.diff import diff_plan, diff_warnings, leftover_shards, leftover_warning, replication_check


@dataclass(frozen=True)
class Verification:
    problems: list[str]  # missing or mismatched (provision_delays fixes them), or under-replicated
    warnings: list[str]  # works, but without a safety net (a delivery exchange shared with NServiceBus,
    # shards left beyond the configured count)
    leaders: str = ""  # quorum queue leaders per node, one line ("quorum leaders: a@h 10, b@h 9")
    under_replicated: int = 0  # of the problems, quorum queues not on every running node or without a leader


def topology_check(*, version: cascade.Version, url: str | None = None) -> Verification:
    """Each missing or mismatched piece of every shard on the broker, and each quorum queue not
    replicated to every running node, as one line (none: healthy); what works with less safety
    than planned (shards left beyond the count among them: never deleted here); and where the
    quorum leaders are. ``url``: another broker than the platform's."""
    target = broker(url)
    plan = cascade.cascade_plan(version)
    exchanges, queues, bindings = target.management.listings(target.vhost)
    replication = _replication(target.management, target.vhost, plan, queues)
    return Verification(
        diff_plan(plan, exchanges, queues, bindings) + replication.problems
        + _fanout_problems(version, exchanges, queues, bindings),
        diff_warnings(plan, exchanges) + [leftover_warning(version, left)
                                          for left in leftover_shards(version, exchanges, queues)],
        replication.summary,
        len(replication.problems),
    )


def _fanout_problems(version: cascade.Version, exchanges, queues, bindings) -> list[str]:
    """A version with envelopes needs the fan-out queue, bound on its delivery exchange (its events'
    copies end there: docs/concepts/fan-out.md); provision_delays declares both."""
    if not version.envelopes:
        return []
    wanted = cascade.Plan(version, (), (cascade.fanout_queue(conf().queue_type),), (cascade.fanout_binding(version),))
    return diff_plan(wanted, exchanges, queues, bindings)


def topology_check_broker(*, quorum: bool, url: str | None = None) -> list[Requirement]:
    """The broker's version, feature flags and dead-letter confirm timeout against what the
    cascades need (``quorum``: some version uses quorum queues)."""
    target = broker(url)
    return requirements_check(broker_facts(target.management, target.vhost), quorum=quorum)


def _replication(management: rabbit.Management, vhost: str, plan: cascade.Plan, listed: list[dict]):
    """The replication check of a plan's quorum queues against the cluster's running nodes. The
    queue listing carries ``members`` and ``leader`` on the brokers we know; a queue it does not
    describe so is asked for on its own."""
    running = [node["name"] for node in management.nodes() if node.get("running")]
    by_name = {q["name"]: q for q in listed}
    details = {}
    for queue in plan.queues:
        found = by_name.get(queue.name)
        if found is None or queue.args.get("x-queue-type") != "quorum":
            continue  # missing: diff_plan says so; classic: nothing to replicate
        details[queue.name] = found if "members" in found else (management.queue(vhost, queue.name) or found)
    return replication_check(plan, details, running)


@dataclass(frozen=True)
class ShardDepth:
    shard: int
    queue: str
    messages: int | None  # None: the queue is missing, or the broker has no statistics yet


@dataclass(frozen=True)
class LevelDepth:
    """One level of the version: its count is the sum over the shards, each shard's beside it."""

    level: int
    queue: str  # shard 0's queue (the other shards' names add -s<shard>)
    ttl_ms: int
    messages: int | None  # over every shard; None: no shard has a count
    ready: int | None
    unacked: int | None
    shards: tuple[ShardDepth, ...] = ()

    @property
    def per_shard(self) -> str:
        """``s0 3 · s1 2``: the breakdown the admin shows beside the sum."""
        return " · ".join(f"s{s.shard} {'—' if s.messages is None else s.messages}" for s in self.shards)


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
    shards: int = 1  # configured (DELAY_SHARDS)
    leftover: dict[int, int] = field(default_factory=dict)  # shard beyond the count -> messages still in it

    @property
    def in_cascade(self) -> int:
        return sum(level.messages or 0 for level in self.levels)


def _sum(counts: list[int | None]) -> int | None:
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _leftover(version: cascade.Version, depths: dict[str, dict]) -> dict[int, int]:
    """Shards beyond the count whose level queues are still on the broker -> their messages."""
    found: dict[int, int] = {}
    for name, queue in depths.items():
        parsed = cascade.parse_level_name(version.prefix, name)
        if parsed and parsed[1] >= version.shards:
            found[parsed[1]] = found.get(parsed[1], 0) + (queue.get("messages") or 0)
    return dict(sorted(found.items()))


def topology_get_in_flight(*, version: TopologyVersion) -> InFlight:
    """Queue depths of a version's levels (summed over its shards, each shard's kept) and
    unroutable queue, and the delivery exchange's endpoint bindings, read from the management
    API (ManagementUnavailable when it is away). The broker refreshes these statistics every
    few seconds, so they lag a little."""
    plan_version, on = version.cascade, broker()
    management, vhost = on.management, on.vhost
    depths = management.queue_depths(vhost)
    delivery = cascade.delivery_exchange(version.prefix)
    bound = {b["routing_key"] for b in management.bindings_from(vhost, delivery) if b["destination_type"] == "queue"}

    def level(number: int) -> LevelDepth:
        names = [cascade.level_name(version.prefix, number, shard) for shard in range(plan_version.shards)]
        queues = [depths.get(name, {}) for name in names]
        return LevelDepth(
            number, names[0], cascade.level_ttl_ms(plan_version, number),
            _sum([q.get("messages") for q in queues]), _sum([q.get("messages_ready") for q in queues]),
            _sum([q.get("messages_unacknowledged") for q in queues]),
            tuple(ShardDepth(shard, name, q.get("messages")) for shard, (name, q) in enumerate(zip(names, queues))),
        )

    unroutable = cascade.unroutable_name(version.prefix)
    bindings = [
        EndpointBinding(name, key, active, key in bound)
        for name, active in Endpoint.objects.order_by("queue").values_list("queue", "is_active")
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
        shards=plan_version.shards,
        leftover=_leftover(plan_version, depths),
    )


def topology_version_count_in_flight() -> dict[str, int | None]:
    """Version name -> messages in its level queues, every shard (those left beyond the count
    too: they are still on their way); one management call; None if unknown."""
    on = broker()
    depths = on.management.queue_depths(on.vhost)
    totals = {}
    for version in TopologyVersion.objects.all():
        counts = [queue.get("messages") for name, queue in depths.items()
                  if (parsed := cascade.parse_level_name(version.prefix, name)) and parsed[0] < version.levels]
        totals[version.name] = _sum(counts)
    return totals


@dataclass(frozen=True)
class VersionDepths:
    levels: dict[int, int]  # level -> messages in it, every shard (levels without statistics yet left out)
    unroutable: int | None


def topology_version_list_depths() -> dict[str, VersionDepths]:
    """Version name -> messages per level and in its unroutable queue, for every provisioned
    version, from one management call (the metrics' figures; the admin's per-version view is
    topology_get_in_flight)."""
    on = broker()
    depths = on.management.queue_depths(on.vhost)
    found = {}
    for version in TopologyVersion.objects.filter(provisioned_at__isnull=False):
        plan_version = version.cascade
        levels = {}
        for number in range(version.levels):
            counted = _sum([depths.get(cascade.level_name(version.prefix, number, shard), {}).get("messages")
                            for shard in range(plan_version.shards)])
            if counted is not None:
                levels[number] = counted
        found[version.name] = VersionDepths(levels, depths.get(cascade.unroutable_name(version.prefix), {})
                                            .get("messages"))
    return found


# --- a move's starting point (moves/delays.py) --------------------------------------------


def topology_list_shards(*, session: rabbit.Session, version: cascade.Version) -> list[int]:
    """The version's shards, and the shards beyond its count still on the broker (the count
    was lowered; probed upwards until one is missing): a move takes every delayed message."""
    shards, top = list(range(version.shards)), version.levels - 1
    while len(shards) < cascade.MAX_SHARDS and session.queue_depth(
            cascade.level_name(version.prefix, top, len(shards))) is not None:
        shards.append(len(shards))
    return shards


def topology_count_by_shard(*, session: rabbit.Session, version: cascade.Version,
                            shards: list[int] | None = None) -> dict[tuple[int, int], int]:
    """(level, shard) -> messages ready in its queue, highest level first, shards in turn."""
    shards = topology_list_shards(session=session, version=version) if shards is None else shards
    return {
        (level, shard): session.queue_depth(cascade.level_name(version.prefix, level, shard)) or 0
        for level in range(version.levels - 1, -1, -1) for shard in shards
    }


def topology_count_by_level(*, session: rabbit.Session, version: cascade.Version) -> dict[int, int]:
    """Level -> messages ready in its queues (every shard), highest level first."""
    depths: dict[int, int] = {}
    for (level, _), depth in topology_count_by_shard(session=session, version=version).items():
        depths[level] = depths.get(level, 0) + depth
    return depths


def topology_count(*, version: cascade.Version, on: rabbit.Broker | None = None) -> int:
    """Messages ready in the version's level queues, every shard (what a move would start with)."""
    with (on or broker()).session() as session:
        return sum(topology_count_by_level(session=session, version=version).values())
