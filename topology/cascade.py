"""The delay cascade as plain data: names, routing keys and the full plan of a version.

Pure functions only, no broker and no Django, so every property of the cascade can be pinned
by table-driven tests. The shape follows the seeds (NServiceBus native delayed delivery, plus
the ingest exchange and "no key dropped silently" rule of the topology-as-code gist).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

DEFAULT_LEVELS = 28
UNIT_MS = 1000
ROUTING_KEY_MAX_BYTES = 255  # AMQP 0-9-1 shortstr
DESTINATION_RE = re.compile(r"^[A-Za-z0-9_-]+$")


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

    def with_(self, *, prefix: str | None = None, levels: int | None = None) -> Version:
        """The same kind of cascade under another prefix or with another number of levels."""
        version = dataclasses.replace(
            self,
            prefix=self.prefix if prefix is None else prefix,
            levels=self.levels if levels is None else levels,
        )
        check_levels(version.levels)
        return version

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
VERSIONS: dict[str, Version] = {v.name: v for v in (V1, V2)}


def get_version(name: str) -> Version:
    try:
        return VERSIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown topology version {name!r}; known: {', '.join(sorted(VERSIONS))}"
        ) from None


# --- names -----------------------------------------------------------------------------------


def level_name(prefix: str, level: int) -> str:
    """Exchange and queue of one level share this name, e.g. ``dp.v2.delay-level-03``."""
    return f"{prefix}delay-level-{level:02d}"


def delivery_exchange(prefix: str) -> str:
    return f"{prefix}delay-delivery"


def ingest_exchange(prefix: str) -> str:
    return f"{prefix}delay-ingest"


def unroutable_name(prefix: str) -> str:
    """Alternate exchange of the delivery exchange and the queue that keeps what it catches."""
    return f"{prefix}delay-unroutable"


def endpoint_binding_key(destination: str) -> str:
    check_destination(destination)
    return f"#.{destination}"


def endpoint_queue(destination: str) -> Queue:
    """An endpoint's queue is named after it, as in the seeds ("destination" queue)."""
    return Queue(check_destination(destination))


def endpoint_binding(prefix: str, destination: str) -> Binding:
    """The delivery exchange of a cascade routes ``#.<destination>`` to the endpoint's queue."""
    return Binding(delivery_exchange(prefix), check_destination(destination), "queue",
                   endpoint_binding_key(destination))


def poison_queue(version: Version) -> Queue:
    """Where migration tools park messages whose remaining delay cannot be worked out."""
    return Queue(f"{version.prefix}delay-migrate-poison", arguments=version.kind_arguments)


# --- delays and keys -------------------------------------------------------------------------


def check_levels(levels: int) -> None:
    if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= 64:
        raise ValueError(f"levels must be a whole number from 1 to 64, got {levels!r}")


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


def check_destination(destination: str, levels: int = DEFAULT_LEVELS) -> str:
    """A destination is one topic word: a ``.``, ``*`` or ``#`` would change what a key matches."""
    if not isinstance(destination, str) or not DESTINATION_RE.match(destination):
        raise ValueError(
            f"destination {destination!r} must be letters, digits, '-' or '_' only"
        )
    longest = 2 * levels + len(destination.encode())
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


def routing_key(delay_units: int, destination: str, levels: int = DEFAULT_LEVELS) -> str:
    """``0.….1.0.1.0.destination``: N bits, most significant first, then the destination."""
    check_destination(destination, levels)
    return ".".join(str(bit) for bit in delay_bits(delay_units, levels)) + f".{destination}"


def parse_routing_key(key: str, levels: int = DEFAULT_LEVELS) -> tuple[int, str]:
    """Inverse of :func:`routing_key`: (delay in units, destination)."""
    words = key.split(".")
    bits, destination = words[:levels], ".".join(words[levels:])
    if len(bits) != levels or any(bit not in ("0", "1") for bit in bits) or not destination:
        raise ValueError(f"{key!r} is not a {levels}-level delay routing key")
    return int("".join(bits), 2), check_destination(destination, levels)


def start_level(delay_units: int, levels: int = DEFAULT_LEVELS) -> int | None:
    """Level of the highest set bit, where publishing starts; None means deliver now."""
    check_delay(delay_units, levels)
    return delay_units.bit_length() - 1 if delay_units else None


def first_exchange(version: Version, delay_units: int) -> str:
    level = start_level(delay_units, version.levels)
    if level is None:
        return delivery_exchange(version.prefix)
    return level_name(version.prefix, level)


def level_ttl_ms(version: Version, level: int) -> int:
    return (1 << level) * version.unit_ms


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    name: str
    type: str = "topic"
    durable: bool = True
    arguments: tuple[tuple[str, object], ...] = ()


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


def _level_bindings(version: Version, level: int) -> tuple[Binding, Binding]:
    name, wildcards = level_name(version.prefix, level), "*." * (version.levels - 1 - level)
    lower = (
        level_name(version.prefix, level - 1) if level else delivery_exchange(version.prefix)
    )
    return (
        Binding(name, name, "queue", f"{wildcards}1.#"),
        Binding(name, lower, "exchange", f"{wildcards}0.#"),
    )


def _ingest_bindings(version: Version) -> list[Binding]:
    ingest, n = ingest_exchange(version.prefix), version.levels
    bindings = [
        Binding(ingest, level_name(version.prefix, level), "exchange", "0." * (n - 1 - level) + "1.#")
        for level in range(n - 1, -1, -1)
    ]
    bindings.append(Binding(ingest, delivery_exchange(version.prefix), "exchange", "0." * n + "#"))
    return bindings


def level_queue(version: Version, level: int) -> Queue:
    lower = (
        level_name(version.prefix, level - 1) if level else delivery_exchange(version.prefix)
    )
    arguments = {
        **dict(version.kind_arguments),
        **dict(version.dead_letter_arguments),
        "x-message-ttl": level_ttl_ms(version, level),
        "x-dead-letter-exchange": lower,
    }
    return Queue(level_name(version.prefix, level), arguments=_frozen(arguments))


def cascade_plan(version: Version) -> Plan:
    """Every exchange, queue and binding of one version, highest level first."""
    check_levels(version.levels)
    prefix, levels = version.prefix, range(version.levels - 1, -1, -1)
    unroutable = unroutable_name(prefix)
    exchanges = [Exchange(unroutable, type="fanout")]
    exchanges.append(
        Exchange(delivery_exchange(prefix), arguments=_frozen({"alternate-exchange": unroutable}))
    )
    exchanges += [Exchange(level_name(prefix, level)) for level in levels]
    exchanges.append(Exchange(ingest_exchange(prefix)))
    queues = [level_queue(version, level) for level in levels]
    queues.append(Queue(unroutable, arguments=version.kind_arguments))
    bindings = [b for level in levels for b in _level_bindings(version, level)]
    bindings += _ingest_bindings(version)
    bindings.append(Binding(unroutable, unroutable, "queue", ""))
    return Plan(version, tuple(exchanges), tuple(queues), tuple(bindings))


# --- the path a message takes (the seeds' example table) -------------------------------------


@dataclass(frozen=True)
class Hop:
    """One row of the path: which exchange sees which key segment and where it routes."""

    level: int | None  # None for the delivery exchange
    exchange: str
    segment_index: int  # which word of the routing key this exchange looks at
    value: str  # "0", "1" or the destination
    routed_to: str
    ttl_ms: int | None  # time spent in a queue at this hop
    dead_letter_to: str | None


def path(version: Version, delay_units: int, destination: str) -> list[Hop]:
    """The hops from the first exchange to the destination queue, as in the seeds' table."""
    key = routing_key(delay_units, destination, version.levels)
    words, prefix, n = key.split("."), version.prefix, version.levels
    hops = []
    first = start_level(delay_units, n)
    for level in range(first if first is not None else -1, -1, -1):
        index = n - 1 - level
        lower = level_name(prefix, level - 1) if level else delivery_exchange(prefix)
        if words[index] == "1":
            queue = level_name(prefix, level)
            hops.append(Hop(level, queue, index, "1", queue, level_ttl_ms(version, level), lower))
        else:
            hops.append(Hop(level, level_name(prefix, level), index, "0", lower, None, None))
    hops.append(Hop(None, delivery_exchange(prefix), n, destination, destination, None, None))
    return hops


def path_ttl_ms(hops: list[Hop]) -> int:
    return sum(hop.ttl_ms or 0 for hop in hops)
