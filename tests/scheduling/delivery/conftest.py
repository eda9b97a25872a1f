"""Fixtures of the delivery tests: another worker's webhook call in flight."""

import threading
from collections.abc import Callable
from contextlib import contextmanager

import pytest
from django.db import connection, transaction


@pytest.fixture
def call_slot_held_elsewhere():
    """``with call_slot_held_elsewhere(take):`` another worker's call to the endpoint in flight while
    inside: ``take()`` (an endpoint's call slot, or one of a key's) holds it in a transaction on a
    connection of its own, released on the way out."""

    @contextmanager
    def held(take: Callable[[], bool]):
        taken, release = threading.Event(), threading.Event()

        def other_call():
            with transaction.atomic():
                assert take()
                taken.set()
                release.wait(10)
            connection.close()

        thread = threading.Thread(target=other_call)
        thread.start()
        assert taken.wait(10)
        try:
            yield
        finally:
            release.set()
            thread.join(10)

    return held
