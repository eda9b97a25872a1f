"""CIDR lists as settings and teams write them: the webhook guard's allowed networks, the
metrics' readers, a team's own. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(value: str | Iterable[str | Network] | None) -> tuple[Network, ...]:
    """``"127.0.0.1/32, 10.1.0.0/16"`` (or a list, from tests' settings) -> networks; ValueError
    naming the item that is not a CIDR."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    networks: list[Network] = []
    for item in items:
        if isinstance(item, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            networks.append(item)
            continue
        text = str(item).strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not a network (CIDR such as 127.0.0.1/32 or fd00::/8)") from None
    return tuple(networks)
