"""The path of a delay as the seeds' example table (pure; used by explain_delay and the admin).

Topic versions (v1, v2) get the seeds' table word for word. Direct versions (v3) get a table of
their own: which key each exchange binds, whether the message carries it, and so whether the
exchange keeps the message (its queue) or passes it down (its alternate exchange). On a shard
other than 0 the labels name the shard (``Level 03, shard 2``).
"""

from __future__ import annotations

from .cascade import DIRECT, Hop, Version, delivery_exchange, parse_level_name, path, path_ttl_ms, route

HEADERS = ("Exchange", "Routing Key Segment", "Routing Value", "Routed To", "Delay in Queue", "Dead-letter To")
DIRECT_HEADERS = ("Exchange", "Binds", "Routed To", "Why", "Delay in Queue", "Dead-letter To")

_UNITS = (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60))


def format_duration(ms: int) -> str:
    """``8 seconds``, ``1 second``, ``134217728 seconds (≈ 4.25 years)``."""
    seconds = ms / 1000
    number = f"{seconds:.0f}" if seconds == int(seconds) else f"{seconds:.3f}".rstrip("0")
    whole = f"{number} second{'' if seconds == 1 else 's'}"
    for unit, size in _UNITS:
        if seconds >= size:
            return f"{whole} (≈ {seconds / size:.2f} {unit})"
    return whole


def _label(version: Version, name: str, kind: str) -> str:
    if name == delivery_exchange(version.prefix):
        return "Delivery Exchange"
    level, shard = parse_level_name(version.prefix, name)
    return f"Level {level:02d}" + (f", shard {shard}" if shard else "") + (f" {kind}" if kind else "")


def _segment(key: str, index: int) -> str:
    words = key.split(".")
    head, word, tail = words[:index], words[index], words[index + 1 :]
    if index >= len(words) - 1:  # the destination is everything after the bits
        word = ".".join(words[index:])
        tail = []
    return ".".join([*head, f"**{word}**", *tail])


def _row(version: Version, key: str, hop: Hop) -> tuple[str, ...]:
    if hop.level is None:
        return ("Delivery Exchange", _segment(key, hop.segment_index), f"`{hop.value}`", f"`{hop.routed_to}`", "-", "-")
    queued = hop.ttl_ms is not None
    return (
        _label(version, hop.exchange, ""),
        _segment(key, hop.segment_index),
        f"`{hop.value}`",
        _label(version, hop.routed_to, "Queue" if queued else "Exchange"),
        format_duration(hop.ttl_ms) if queued else "-",
        _label(version, hop.dead_letter_to, "Exchange") if queued else "-",
    )


def _direct_row(version: Version, hop: Hop) -> tuple[str, ...]:
    if hop.level is None:
        return ("Delivery Exchange", f"`{hop.value}`", f"`{hop.routed_to}`", f"routing key `{hop.value}`", "-", "-")
    if hop.matched:
        return (_label(version, hop.exchange, ""), f"`{hop.value}`", _label(version, hop.routed_to, "Queue"),
                f"CC has `{hop.value}`", format_duration(hop.ttl_ms), _label(version, hop.dead_letter_to, "Exchange"))
    return (_label(version, hop.exchange, ""), f"`{hop.value}`", _label(version, hop.routed_to, "Exchange"),
            f"no `{hop.value}`: alternate exchange", "-", "-")


def headers(version: Version) -> tuple[str, ...]:
    return DIRECT_HEADERS if version.routing == DIRECT else HEADERS


def explain_rows(version: Version, delay_units: int, destination: str, shard: int = 0) -> list[tuple[str, ...]]:
    hops = path(version, delay_units, destination, shard)
    if version.routing == DIRECT:
        return [_direct_row(version, hop) for hop in hops]
    key = route(version, delay_units, destination, shard).routing_key
    return [_row(version, key, hop) for hop in hops]


def describe_route(version: Version, delay_units: int, destination: str, shard: int = 0) -> str:
    """``published to <exchange> with routing key <key> [and CC …]``: the publish in one line."""
    r = route(version, delay_units, destination, shard)
    cc = f" and CC {', '.join(r.cc)}" if r.cc else ""
    return f"published to {r.exchange} with routing key {r.routing_key}{cc}"


def describe_queues(version: Version, delay_units: int, destination: str, shard: int = 0) -> str:
    """The queues the message waits in, by name, then the delivery exchange: which of a sharded
    version's queues to look in."""
    hops = path(version, delay_units, destination, shard)
    held = [f"{hop.exchange} ({format_duration(hop.ttl_ms)})" for hop in hops if hop.ttl_ms is not None]
    total = format_duration(path_ttl_ms(hops))
    return (f"waits in {', '.join(held)}, {total} in all; then " if held else "no queue; straight to ") + \
        f"{delivery_exchange(version.prefix)} -> {destination}"


def markdown_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells):
        return "|" + "|".join(f" {str(c).ljust(w)} " for c, w in zip(cells, widths)) + "|"

    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
