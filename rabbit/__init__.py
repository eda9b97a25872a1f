"""Broker I/O, in one place: connections, declaring plans, confirmed publishing, reading and
consuming queues, and the management API. kombu, amqp and requests-for-the-broker are imported
here and nowhere else in the platform (the Celery app aside); ``topology/`` stays pure data."""

from .broker import Broker, Session
from .consumer import Consumer
from .errors import BrokerError, BrokerUnavailable, ManagementUnavailable, TopologyConflict, TopologyMissing
from .management import Management
from .publish import DEFAULT_WINDOW, Outcome, Outgoing
from .received import Received

__all__ = [
    "DEFAULT_WINDOW",
    "Broker",
    "BrokerError",
    "BrokerUnavailable",
    "Consumer",
    "Management",
    "ManagementUnavailable",
    "Outcome",
    "Outgoing",
    "Received",
    "Session",
    "TopologyConflict",
    "TopologyMissing",
]
