"""An endpoint's queue bound on a cascade straight through the broker, without the platform's API
or database: what broker-level tests and the benchmark's raw publisher deliver into."""

from __future__ import annotations


def bind_endpoint(session, version, name: str) -> str:
    """Declare an endpoint's queue and bind it on a cascade's delivery exchange (session: a
    rabbit.Session; version: a topology.cascade.Version)."""
    from topology import cascade

    session.declare_queue(cascade.endpoint_queue(name))
    session.bind(cascade.endpoint_binding(version, name))
    return name
