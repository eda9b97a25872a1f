import uuid

import pytest

from topology import cascade


@pytest.fixture
def queue(amqp):
    """A classic queue of the test's own, removed afterwards."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    amqp.declare_queue(cascade.Queue(name))
    yield name
    amqp.delete_queue(name)
