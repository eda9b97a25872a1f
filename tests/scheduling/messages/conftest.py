"""What the messages' service tests share: a v2 endpoint of the test's own, and scheduling one
message on it by name, as a caller does."""

import pytest

from scheduling.messages.services import message_schedule


@pytest.fixture
def endpoint(endpoint_of):
    return endpoint_of("v2")


def schedule(endpoint, **kwargs):
    kwargs.setdefault("payload", {"n": 1})
    return message_schedule(endpoint=endpoint.name, **kwargs)
