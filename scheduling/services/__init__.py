"""Writes: every change to the platform's state goes through a function here."""

from .delays import delays_preview
from .endpoints import (
    endpoint_bind,
    endpoint_create,
    endpoint_rotate_secret,
    endpoint_set_active,
    endpoint_update,
    endpoints_bind_all,
)
from .messages import Scheduled, message_cancel, message_republish, message_schedule, message_schedule_many
from .topology import (
    ProvisionResult,
    topology_declare,
    topology_in_flight,
    topology_provision,
    topology_verify,
    versions_in_flight,
)

__all__ = [
    "ProvisionResult",
    "delays_preview",
    "Scheduled",
    "endpoint_bind",
    "endpoint_create",
    "endpoint_rotate_secret",
    "endpoint_set_active",
    "endpoint_update",
    "endpoints_bind_all",
    "message_cancel",
    "message_republish",
    "message_schedule",
    "message_schedule_many",
    "topology_declare",
    "topology_in_flight",
    "topology_provision",
    "topology_verify",
    "versions_in_flight",
]
