"""What can go wrong on the broker, as one family of exceptions with one readable line each.

Callers (commands, the admin, the API) catch :class:`BrokerError` and show its text; nothing
outside this package needs to know kombu's, amqp's or requests' exception types."""


class BrokerError(Exception):
    """Base of every broker failure the platform reports to a user."""


class BrokerUnavailable(BrokerError):
    """RabbitMQ could not be reached, refused the connection, or the connection broke."""


class TopologyConflict(BrokerError):
    """The broker already has an entity of that name, declared differently."""


class TopologyMissing(BrokerError):
    """An entity this operation needs does not exist on the broker."""


class ManagementUnavailable(BrokerError):
    """The management API could not be reached or refused the request."""
