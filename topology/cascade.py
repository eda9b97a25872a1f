"""The delay cascade as plain data: names, routing keys and the full plan of a version.

Pure functions only, no broker and no Django, so every property of the cascade can be pinned
by table-driven tests. Two shapes of the same cascade (one TTL queue per bit of the delay):

- **topic** (v1, v2): the seeds' design, NServiceBus native delayed delivery byte for byte, plus
  the ingest exchange and "no key dropped silently" rule of the topology-as-code gist. The
  routing key spells the delay in N words; every level's topic exchange matches it.
- **direct** (v3, the platform's own): level L is a direct exchange that binds its queue with the
  bit key ``bit:LL`` and passes everything else to level L-1 as its alternate exchange. A message
  carries its destination as the routing key and its set bits as ``CC`` keys; dead-lettering
  keeps both. Matching a short key in a hash table instead of a 29-word key in the topic trie
  halves the broker's CPU per message (docs/operations/performance.md).

A version may have **shards**: k parallel cascades of the same version, because one level of one
cascade is one quorum queue, bounded by what one Raft leader on one node can dead-letter. Shard 0
keeps the unsuffixed names (so a version of one shard is exactly the cascade above); shard s >= 1
has its own levels and ingest exchange, suffixed ``-s<s>``. The delivery exchange and the
unroutable exchange and queue are the version's, shared by every shard, so endpoints bind once.
A message travels on the shard its id picks (:func:`shard_of`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import uuid
import zlib
from dataclasses import dataclass

DEFAULT_LEVELS = 28
UNIT_MS = 1000
ROUTING_KEY_MAX_BYTES = 255  # AMQP 0-9-1 shortstr
TOPIC, DIRECT = "topic", "direct"  # how a version's levels route (see the module docstring)
DESTINATION_RE = re.compile(r"^[A-Za-z0-9_-]+$")  # one topic word: safe on every version
DOTTED_DESTINATION_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")  # safe where routing is direct
MAX_SHARDS = 64
CC_HEADER = "CC"  # RabbitMQ routes a message by its routing key and these keys too (sender-selected
# distribution); dead-lettering keeps them, which is what carries a v3 message's bits down


def _frozen(mapping: dict | None) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((mapping or {}).items()))


@dataclass(frozen=True)
class Version:
    """One generation of the cascade. Versions are data: v1 and v2 differ only in these fields."""

    name: str
    prefix: str
    kind_arguments: tuple[tuple[str, object], ...]  # what kind of queue (classic lazy, quorum)
    dead_letter_arguments: tuple[tuple[str, object], ...] = ()  # how level queues dead-letter
    levels: int = DEFAULT_LEVELS
    unit_ms: int = UNIT_MS
    routing: str = TOPIC
    shards: int = 1  # parallel cascades of this version (see the module docstring)

    def with_(self, *, prefix: str | None = None, levels: int | None = None, shards: int | None = None) -> Version:
        """The same kind of cascade under another prefix, with another number of levels or shards."""
        version = dataclasses.replace(
            self,
            prefix=self.prefix if prefix is None else prefix,
            levels=self.levels if levels is None else levels,
            shards=self.shards if shards is None else shards,
        )
        check_levels(version.levels)
        check_shards(version.shards)
        return version

    @property
    def envelopes(self) -> bool:
        """Whether one broker message may carry many of the platform's messages: not on the topic
        versions (v1, v2), which stay NServiceBus's one message per broker message, byte for byte."""
        return self.routing != TOPIC

    @property
    def queue_kind(self) -> str:
        return dict(self.kind_arguments).get("x-queue-type", "classic")

    @property
    def max_delay_units(self) -> int:
        return max_delay_units(self.levels)

    @property
    def max_delay_ms(self) -> int:
        return self.max_delay_units * self.unit_ms


V1 = Version(name="v1", prefix="dp.", kind_arguments=_frozen({"x-queue-mode": "lazy"}))
V2 = Version(
    name="v2",
    prefix="dp.v2.",
    kind_arguments=_frozen({"x-queue-type": "quorum"}),
    dead_letter_arguments=_frozen(
        {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
    ),
)
V3 = Version(
    name="v3",
    prefix="dp.v3.",
    kind_arguments=V2.kind_arguments,
    dead_letter_arguments=V2.dead_letter_arguments,
    routing=DIRECT,
)
VERSIONS: dict[str, Version] = {v.name: v for v in (V1, V2, V3)}


def get_version(name: str) -> Version:
    try:
        return VERSIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown topology version {name!r}; known: {', '.join(sorted(VERSIONS))}"
        ) from None


# --- names -----------------------------------------------------------------------------------


def shard_suffix(shard: int) -> str:
    """Nothing for shard 0 (today's names), ``-s<shard>`` after: every name keeps the prefix."""
    return f"-s{shard}" if shard else ""


def level_name(prefix: str, level: int, shard: int = 0) -> str:
    """Exchange and queue of one level share this name, e.g. ``dp.v2.delay-level-03``, or
    ``dp.v3.delay-level-03-s2`` on shard 2."""
    return f"{prefix}delay-level-{level:02d}{shard_suffix(shard)}"


_LEVEL_NAME_RE = re.compile(r"delay-level-(\d\d)(?:-s([1-9]\d*))?")


def parse_level_name(prefix: str, name: str) -> tuple[int, int] | None:
    """(level, shard) of a level exchange or queue under exactly this prefix; None for any other
    name (another version's prefix that starts with this one included)."""
    match = _LEVEL_NAME_RE.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
    return (int(match[1]), int(match[2] or 0)) if match else None


_INGEST_NAME_RE = re.compile(r"delay-ingest(?:-s([1-9]\d*))?")


def shard_of_name(prefix: str, name: str) -> int | None:
    """The shard a level exchange or queue, or an ingest exchange, under this prefix belongs to;
    None for the shared pieces and for names that are not this prefix's."""
    level = parse_level_name(prefix, name)
    if level is not None:
        return level[1]
    match = _INGEST_NAME_RE.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
    return int(match[1] or 0) if match else None


def delivery_exchange(prefix: str) -> str:
    """One per version, shared by its shards: endpoints bind here once."""
    return f"{prefix}delay-delivery"


def ingest_exchange(prefix: str, shard: int = 0) -> str:
    return f"{prefix}delay-ingest{shard_suffix(shard)}"


def unroutable_name(prefix: str) -> str:
    """Alternate exchange of the delivery exchange and the queue that keeps what it catches."""
    return f"{prefix}delay-unroutable"


def next_exchange(version: Version, level: int, shard: int = 0) -> str:
    """Where level L passes a message on (its dead-letter exchange, and on direct versions its
    alternate exchange too): level L-1 of the same shard, or the shared delivery exchange below
    level 0."""
    return level_name(version.prefix, level - 1, shard) if level else delivery_exchange(version.prefix)


def bit_key(level: int) -> str:
    """The key a direct level binds its queue with. The ``:`` keeps it out of the names an
    endpoint may have, so no endpoint's routing key or binding can ever equal a bit key."""
    return f"bit:{level:02d}"


def endpoint_binding_key(version: Version, destination: str) -> str:
    """Topic versions bind ``#.<destination>`` (the seeds); direct versions the name itself."""
    check_destination(destination, version)
    return destination if version.routing == DIRECT else f"#.{destination}"


def endpoint_queue(destination: str, queue_type: str = "classic") -> Queue:
    """An endpoint's queue is named after it, as in the seeds ("destination" queue); a quorum
    queue on a cluster (replicated, so it survives a node)."""
    arguments = {"x-queue-type": "quorum"} if queue_type == "quorum" else None
    return Queue(check_destination(destination), arguments=_frozen(arguments))


def endpoint_binding(version: Version, destination: str) -> Binding:
    """The delivery exchange of a cascade routes the destination's messages to its queue."""
    return Binding(delivery_exchange(version.prefix), destination, "queue",
                   endpoint_binding_key(version, destination))


# The platform's fan-out queue (docs/concepts/fan-out.md): an event's one copy in the cascade
# arrives here, and the delivery loops fan it out to its messages' endpoints. One name for every
# version with envelopes; "dp." is reserved to the platform, so no endpoint or team user reaches it.
FANOUT_QUEUE = "dp.delay-fanout"


def fanout_queue(queue_type: str = "classic") -> Queue:
    """Declared like an endpoint's queue (DELAY_QUEUE_TYPE): it is one, of the platform's."""
    return endpoint_queue(FANOUT_QUEUE, queue_type)


def fanout_binding(version: Version) -> Binding:
    """The fan-out queue bound on a version's delivery exchange, as an endpoint's queue is."""
    return endpoint_binding(version, FANOUT_QUEUE)


def carries(version: Version, destination: str) -> bool:
    """Whether this version can deliver to the destination: a dotted name only travels where
    routing is direct (on a topic version, ``#.b`` of an endpoint ``b`` would also catch ``a.b``)."""
    try:
        check_destination(destination, version)
    except ValueError:
        return False
    return True


def poison_queue(version: Version) -> Queue:
    """Where migration tools park messages whose remaining delay cannot be worked out."""
    return Queue(f"{version.prefix}delay-migrate-poison", arguments=version.kind_arguments)


# --- delays and keys -------------------------------------------------------------------------


def check_levels(levels: int) -> None:
    if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= 64:
        raise ValueError(f"levels must be a whole number from 1 to 64, got {levels!r}")


def check_shards(shards: int) -> None:
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be a whole number from 1 to {MAX_SHARDS}, got {shards!r}")


def check_shard(version: Version, shard: int) -> int:
    if not isinstance(shard, int) or isinstance(shard, bool) or not 0 <= shard < version.shards:
        raise ValueError(f"{version.name} has {version.shards} shard(s): no shard {shard!r}")
    return shard


def shard_of(message_id, shards: int) -> int:
    """The shard a message travels on: its id as a UUID's integer modulo the shard count (every
    spelling of one UUID gives the same shard), or the CRC-32 of an id that is not a UUID; no
    id, shard 0. Stable across processes and restarts, unlike ``hash()``, so every publisher
    and every tool agrees on it."""
    check_shards(shards)
    if shards == 1 or message_id is None:
        return 0
    if isinstance(message_id, uuid.UUID):
        return message_id.int % shards
    text = message_id.decode() if isinstance(message_id, bytes) else str(message_id)
    try:
        return uuid.UUID(text).int % shards
    except ValueError:
        return zlib.crc32(text.encode()) % shards


def max_delay_units(levels: int = DEFAULT_LEVELS) -> int:
    """Largest delay in units: every bit set (268,435,455 s, about 8.5 years, for 28 levels)."""
    check_levels(levels)
    return (1 << levels) - 1


def check_delay(delay_units: int, levels: int = DEFAULT_LEVELS) -> int:
    if not isinstance(delay_units, int) or isinstance(delay_units, bool):
        raise ValueError(f"delay must be a whole number of units, got {delay_units!r}")
    limit = max_delay_units(levels)
    if delay_units < 0:
        raise ValueError(f"delay must not be negative (got {delay_units}); the range is 0..{limit}")
    if delay_units > limit:
        raise ValueError(f"delay {delay_units} is over the maximum of {limit} for {levels} levels")
    return delay_units


def check_destination(destination: str, version: Version | None = None) -> str:
    """An endpoint's name, as a queue (``version`` None: words of letters, digits, '-' and '_',
    joined by dots) or as a destination on a version's cascade: one topic word on a topic version
    (a ``.``, ``*`` or ``#`` would change what a key matches), and a routing key that fits."""
    if not isinstance(destination, str) or not DOTTED_DESTINATION_RE.match(destination):
        raise ValueError(
            f"destination {destination!r} must be letters, digits, '-' or '_', in words joined by '.'"
        )
    if version is not None and version.routing == TOPIC and not DESTINATION_RE.match(destination):
        raise ValueError(
            f"destination {destination!r} has dots: {version.name} routes by topic keys, where the binding "
            f"'#.<name>' of another endpoint could catch its messages; dotted names travel on direct "
            f"versions (v3) only"
        )
    longest = len(destination.encode()) + (2 * version.levels if version and version.routing == TOPIC else 0)
    if longest > ROUTING_KEY_MAX_BYTES:
        raise ValueError(
            f"destination {destination!r} is too long: the routing key would be {longest} "
            f"bytes, the limit is {ROUTING_KEY_MAX_BYTES}"
        )
    return destination


def delay_bits(delay_units: int, levels: int = DEFAULT_LEVELS) -> list[int]:
    """The delay in binary, most significant bit (level N-1) first."""
    check_delay(delay_units, levels)
    return [(delay_units >> level) & 1 for level in range(levels - 1, -1, -1)]


def set_levels(delay_units: int, levels: int = DEFAULT_LEVELS) -> list[int]:
    """The levels whose queue the message waits in: its set bits, highest first."""
    return [level for level, bit in zip(range(levels - 1, -1, -1), delay_bits(delay_units, levels)) if bit]


def routing_key(delay_units: int, destination: str, levels: int = DEFAULT_LEVELS) -> str:
    """Topic versions: ``0.….1.0.1.0.destination``, N bits, most significant first, then the
    destination."""
    check_destination(destination, V2.with_(levels=levels))
    return ".".join(str(bit) for bit in delay_bits(delay_units, levels)) + f".{destination}"


def parse_routing_key(key: str, levels: int = DEFAULT_LEVELS) -> tuple[int, str]:
    """Inverse of :func:`routing_key`: (delay in units, destination)."""
    words = key.split(".")
    bits, destination = words[:levels], ".".join(words[levels:])
    if len(bits) != levels or any(bit not in ("0", "1") for bit in bits) or not destination:
        raise ValueError(f"{key!r} is not a {levels}-level delay routing key")
    return int("".join(bits), 2), check_destination(destination, V2.with_(levels=levels))


def cc_keys(delay_units: int, levels: int = DEFAULT_LEVELS) -> tuple[str, ...]:
    """Direct versions: the bit keys of a delay, highest first (``CC`` header)."""
    return tuple(bit_key(level) for level in set_levels(delay_units, levels))


def parse_cc_keys(keys, levels: int = DEFAULT_LEVELS) -> int:
    """Inverse of :func:`cc_keys`: the delay in units (no keys: 0). Keys that are not bit keys
    of this cascade are a ValueError."""
    delay = 0
    for key in keys or ():
        key = key.decode() if isinstance(key, bytes) else key
        level = int(key[4:]) if isinstance(key, str) and key[:4] == "bit:" and key[4:].isdigit() else -1
        if not 0 <= level < levels or key != bit_key(level):
            raise ValueError(f"{key!r} is not a bit key of a {levels}-level cascade")
        delay |= 1 << level
    return delay


def start_level(delay_units: int, levels: int = DEFAULT_LEVELS) -> int | None:
    """Level of the highest set bit, where publishing starts; None means deliver now."""
    check_delay(delay_units, levels)
    return delay_units.bit_length() - 1 if delay_units else None


def first_exchange(version: Version, delay_units: int, shard: int = 0) -> str:
    check_shard(version, shard)
    level = start_level(delay_units, version.levels)
    if level is None:
        return delivery_exchange(version.prefix)
    return level_name(version.prefix, level, shard)


def level_ttl_ms(version: Version, level: int) -> int:
    return (1 << level) * version.unit_ms


@dataclass(frozen=True)
class Route:
    """How to publish a message into a cascade: exchange, routing key and (direct versions)
    the ``CC`` bit keys."""

    delay_units: int  # whole cascade units (seconds) it will spend in the levels
    exchange: str
    routing_key: str
    cc: tuple[str, ...] = ()

    @property
    def headers(self) -> dict:
        return {CC_HEADER: list(self.cc)} if self.cc else {}


@functools.lru_cache(maxsize=8192)
def route(version: Version, delay_units: int, destination: str, shard: int = 0) -> Route:
    """Publish at the level of the highest set bit of the message's shard (``shard_of`` its
    id; a zero delay: the shared delivery exchange). Cached: a batch sends many messages with
    the same delay to the same destination."""
    exchange = first_exchange(version, delay_units, shard)
    if version.routing == DIRECT:
        check_destination(destination, version)
        return Route(delay_units, exchange, destination, cc_keys(delay_units, version.levels))
    return Route(delay_units, exchange, routing_key(delay_units, destination, version.levels))


def read_route(version: Version, routing_key_: str, cc) -> tuple[int | None, str | None]:
    """What a message found in this version's queues says: (delay units its key encodes,
    destination); None where it does not say (a foreign message)."""
    try:
        if version.routing == DIRECT:
            return parse_cc_keys(cc, version.levels), check_destination(routing_key_, version)
        return parse_routing_key(routing_key_, version.levels)
    except (ValueError, TypeError):
        return None, None


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    name: str
    type: str = "topic"
    durable: bool = True
    arguments: tuple[tuple[str, object], ...] = ()
    # Another system may already have declared it without our arguments (NServiceBus declares
    # the delivery exchange without an alternate exchange): then it is kept as it is.
    may_exist_without_arguments: bool = False


@dataclass(frozen=True)
class Queue:
    name: str
    durable: bool = True
    arguments: tuple[tuple[str, object], ...] = ()

    @property
    def args(self) -> dict:
        return dict(self.arguments)


@dataclass(frozen=True)
class Binding:
    source: str
    destination: str
    destination_type: str  # "queue" or "exchange"
    routing_key: str


@dataclass(frozen=True)
class Plan:
    version: Version
    exchanges: tuple[Exchange, ...]
    queues: tuple[Queue, ...]
    bindings: tuple[Binding, ...]

    @property
    def delivery_exchange(self) -> str:
        return delivery_exchange(self.version.prefix)


def _topic_level_bindings(version: Version, level: int, shard: int) -> tuple[Binding, Binding]:
    name, wildcards = level_name(version.prefix, level, shard), "*." * (version.levels - 1 - level)
    return (
        Binding(name, name, "queue", f"{wildcards}1.#"),
        Binding(name, next_exchange(version, level, shard), "exchange", f"{wildcards}0.#"),
    )


def _ingest_bindings(version: Version, shard: int) -> list[Binding]:
    ingest, n = ingest_exchange(version.prefix, shard), version.levels
    bindings = [
        Binding(ingest, level_name(version.prefix, level, shard), "exchange", "0." * (n - 1 - level) + "1.#")
        for level in range(n - 1, -1, -1)
    ]
    bindings.append(Binding(ingest, delivery_exchange(version.prefix), "exchange", "0." * n + "#"))
    return bindings


def level_queue(version: Version, level: int, shard: int = 0) -> Queue:
    arguments = {
        **dict(version.kind_arguments),
        **dict(version.dead_letter_arguments),
        "x-message-ttl": level_ttl_ms(version, level),
        "x-dead-letter-exchange": next_exchange(version, level, shard),
    }
    return Queue(level_name(version.prefix, level, shard), arguments=_frozen(arguments))


def _passing_down(name: str, to: str) -> Exchange:
    """A direct exchange that hands what none of its bindings takes to ``to``."""
    return Exchange(name, type=DIRECT, arguments=_frozen({"alternate-exchange": to}))


def shard_plan(version: Version, shard: int = 0) -> Plan:
    """Every exchange, queue and binding of one shard, highest level first. Shard 0's plan also
    holds what the shards share (the delivery exchange, the unroutable exchange and queue), so
    it is declared first: the other shards' lowest level passes into its delivery exchange."""
    check_levels(version.levels)
    check_shard(version, shard)
    prefix, levels, shared = version.prefix, range(version.levels - 1, -1, -1), shard == 0
    unroutable, delivery = unroutable_name(prefix), delivery_exchange(prefix)
    exchanges = [Exchange(unroutable, type="fanout")] if shared else []
    queues = [level_queue(version, level, shard) for level in levels]
    if shared:
        queues.append(Queue(unroutable, arguments=version.kind_arguments))
    if version.routing == DIRECT:
        if shared:
            exchanges.append(_passing_down(delivery, unroutable))
        exchanges += [_passing_down(level_name(prefix, level, shard), next_exchange(version, level, shard))
                      for level in levels]
        # the ingest exchange binds nothing: every message falls through to the top level, which
        # keeps it or passes it down, so a producer need not compute where to start
        exchanges.append(_passing_down(ingest_exchange(prefix, shard), level_name(prefix, version.levels - 1, shard)))
        bindings = [Binding(level_name(prefix, level, shard), level_name(prefix, level, shard), "queue",
                            bit_key(level)) for level in levels]
    else:
        if shared:
            exchanges.append(Exchange(delivery, arguments=_frozen({"alternate-exchange": unroutable}),
                                      may_exist_without_arguments=True))
        exchanges += [Exchange(level_name(prefix, level, shard)) for level in levels]
        exchanges.append(Exchange(ingest_exchange(prefix, shard)))
        bindings = [b for level in levels for b in _topic_level_bindings(version, level, shard)]
        bindings += _ingest_bindings(version, shard)
    if shared:
        bindings.append(Binding(unroutable, unroutable, "queue", ""))
    return Plan(version, tuple(exchanges), tuple(queues), tuple(bindings))


def shard_plans(version: Version) -> list[Plan]:
    """One plan per shard, shard 0 first: declare shard s through ``first_node=s`` so the same
    level of different shards gets its quorum leader on a different node."""
    return [shard_plan(version, shard) for shard in range(version.shards)]


def cascade_plan(version: Version) -> Plan:
    """Every exchange, queue and binding of one version, all its shards (shard 0 first, each
    highest level first): what verify, export and teardown work on. One shard: exactly the
    cascade of a version without shards."""
    plans = shard_plans(version)
    if len(plans) == 1:
        return plans[0]
    return Plan(version, *(tuple(item for plan in plans for item in getattr(plan, part))
                           for part in ("exchanges", "queues", "bindings")))


# --- the path a message takes (the seeds' example table) -------------------------------------


@dataclass(frozen=True)
class Hop:
    """One exchange on the path: what it looks at and where the message goes from there."""

    level: int | None  # None for the delivery exchange
    exchange: str
    value: str  # topic: the key's word this exchange reads ("0", "1", the destination); direct: the key it binds
    routed_to: str
    ttl_ms: int | None  # time spent in a queue at this hop
    dead_letter_to: str | None
    segment_index: int | None = None  # topic: which word of the routing key
    matched: bool = True  # direct: the message carries the bound key (else the alternate exchange takes it)


def path(version: Version, delay_units: int, destination: str, shard: int = 0) -> list[Hop]:
    """The hops from the first exchange to the destination queue, as in the seeds' table, on
    one shard's levels."""
    r = route(version, delay_units, destination, shard)
    prefix, n = version.prefix, version.levels
    words, held = r.routing_key.split("."), set(set_levels(delay_units, n))
    hops = []
    first = start_level(delay_units, n)
    for level in range(first if first is not None else -1, -1, -1):
        name, lower = level_name(prefix, level, shard), next_exchange(version, level, shard)
        index = None if version.routing == DIRECT else n - 1 - level
        value = bit_key(level) if version.routing == DIRECT else words[index]
        if level in held:
            hops.append(Hop(level, name, value, name, level_ttl_ms(version, level), lower, index))
        else:
            hops.append(Hop(level, name, value, lower, None, None, index, matched=False))
    index = None if version.routing == DIRECT else n
    hops.append(Hop(None, delivery_exchange(prefix), destination, destination, None, None, index))
    return hops


def path_ttl_ms(hops: list[Hop]) -> int:
    return sum(hop.ttl_ms or 0 for hop in hops)
