"""Where the platform's broker is: one place that turns settings into connections."""

from contextlib import contextmanager

from amqp.exceptions import AMQPError
from django.conf import settings
from kombu import Connection
from kombu.exceptions import OperationalError

from topology.management import Management, management_url_for, vhost_of


def broker_url() -> str:
    return settings.BROKER_URL


def connection(url: str | None = None) -> Connection:
    """A kombu connection that fails fast (5 s) instead of retrying forever."""
    return Connection(url or broker_url(), connect_timeout=5, transport_options={"max_retries": 0})


def management(url: str | None = None) -> Management:
    configured = settings.RABBITMQ_MANAGEMENT_URL if url is None else ""
    return Management(configured or management_url_for(url or broker_url()))


def vhost(url: str | None = None) -> str:
    return vhost_of(url or broker_url())


def describe(url: str | None = None) -> str:
    """The broker URL without its password, for messages to users."""
    return Connection(url or broker_url()).as_uri(include_password=False)


class BrokerUnavailable(Exception):
    """RabbitMQ could not be reached or refused the connection."""


def open_connection(url: str | None = None) -> Connection:
    """A connected kombu connection, or :class:`BrokerUnavailable` with one readable line."""
    conn = connection(url)
    try:
        conn.connect()
    except (OSError, AMQPError, OperationalError) as exc:
        conn.release()
        reason = getattr(exc, "reply_text", None) or str(exc) or type(exc).__name__
        raise BrokerUnavailable(f"cannot connect to RabbitMQ at {describe(url)}: {reason}") from None
    return conn


@contextmanager
def connected(url: str | None = None):
    conn = open_connection(url)
    try:
        yield conn
    finally:
        conn.release()
