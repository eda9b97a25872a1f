"""Ports free on 127.0.0.1 (for a server a test or benchmark starts, or a port nothing listens on).
Asked of the kernel, never derived from a name: parallel test processes must not pick the same one."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Ports free now, all different (the sockets are held until every one is known)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """A port free now; nothing listens on it until the caller starts something there."""
    return free_ports(1)[0]
