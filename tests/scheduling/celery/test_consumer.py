"""The platform's Celery consumer (scheduling/celery/consumer.py): Celery's steps, two of them made
to survive a cluster node's loss. Real workers run it in every e2e test; here, the two rules."""

import pytest
from amqp.exceptions import NotFound
from celery.worker.consumer.delayed_delivery import DelayedDelivery

from scheduling.celery import consumer


def test_the_blueprint_is_celerys_with_the_two_steps_replaced():
    from celery.worker.consumer import Consumer as CeleryConsumer

    ours, theirs = consumer.Consumer.Blueprint.default_steps, CeleryConsumer.Blueprint.default_steps
    assert len(ours) == len(theirs)
    assert [a for a, b in zip(ours, theirs) if a != b] == [
        "scheduling.celery.consumer:ControlRetried", "scheduling.celery.consumer:DelayedDeliveryOnce"]
    assert consumer.ControlRetried.name == "celery.worker.consumer.control.Control"


def test_remote_control_tries_again_while_its_queue_cannot_be_bound(monkeypatch):
    monkeypatch.setattr(consumer.time, "sleep", lambda s: None)
    calls = []

    def start(c):
        calls.append(c)
        if len(calls) < 3:
            raise NotFound("NOT_FOUND - no queue 'w@h.celery.pidbox'", (50, 20), "Queue.bind")
        return "listening"

    assert consumer.ControlRetried._retrying(start)("c") == "listening" and calls == ["c"] * 3


def test_remote_control_gives_up_after_its_attempts(monkeypatch):
    monkeypatch.setattr(consumer.time, "sleep", lambda s: None)
    monkeypatch.setattr(consumer, "PIDBOX_ATTEMPTS", 4)
    calls = []

    def start(c):
        calls.append(c)
        raise NotFound("NOT_FOUND", (50, 20), "Queue.bind")

    with pytest.raises(NotFound):
        consumer.ControlRetried._retrying(start)("c")
    assert len(calls) == 4


def test_native_delayed_delivery_is_set_up_once_per_worker(monkeypatch):
    runs = []
    monkeypatch.setattr(DelayedDelivery, "start", lambda self, c: runs.append(c))
    monkeypatch.setattr(consumer.DelayedDeliveryOnce, "done", False)
    step = consumer.DelayedDeliveryOnce.__new__(consumer.DelayedDeliveryOnce)
    for c in ("first start", "reconnect", "reconnect"):
        step.start(c)
    assert runs == ["first start"]
