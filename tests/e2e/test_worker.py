"""The worker's consumption of endpoint queues follows the Endpoint table, and survives the
broker cancelling a consumer (a consumed queue deleted)."""

import pytest

from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


def create(api, name) -> str:
    """The endpoint's queue (its team's: the default team's here)."""
    response = api.post("/api/endpoints/", {"name": name}, format="json")
    assert response.status_code == 201
    return response.json()["queue"]


def schedule(api, name, delay):
    response = api.post("/api/messages/", {"endpoint": name, "payload": {}, "delay_seconds": delay}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def status_of(message_id):
    return ScheduledMessage.objects.get(id=message_id).status


def consumers(name):
    return (broker().management.queue(broker().vhost, name) or {}).get("consumers", 0)


def test_deactivating_pauses_delivery_and_activating_resumes_it(api, platform, worker, endpoint_name, amqp):
    queue = create(api, endpoint_name)
    wait_until(lambda: consumers(queue) == 1, 15, message="the worker to consume the queue")
    message_id = schedule(api, endpoint_name, 3)
    wait_until(lambda: status_of(message_id) == Status.PUBLISHED, 5, message="published")

    assert api.post(f"/api/endpoints/{endpoint_name}/deactivate/").json()["is_active"] is False
    refused = api.post("/api/messages/", {"endpoint": endpoint_name, "payload": {}, "delay_seconds": 0},
                       format="json")
    assert refused.status_code == 400 and "inactive" in refused.json()["endpoint"][0]
    wait_until(lambda: consumers(queue) == 0, 15, message="the worker to stop consuming")
    # due while paused: it waits in the endpoint's queue, nothing is lost or marked delivered
    wait_until(lambda: amqp.queue_depth(queue) == 1, 15, message="parked in queue")
    assert status_of(message_id) == Status.PUBLISHED

    assert api.post(f"/api/endpoints/{endpoint_name}/activate/").json()["is_active"] is True
    wait_until(lambda: status_of(message_id) == Status.DELIVERED, 15, message="delivered after resume")


def test_worker_survives_a_consumed_queue_being_deleted(api, platform, worker, endpoint_name, amqp):
    doomed, other = endpoint_name, endpoint_name + "-other"
    doomed_queue = create(api, doomed)
    create(api, other)
    first = schedule(api, other, 0)
    wait_until(lambda: status_of(first) == Status.DELIVERED, 15, message="first delivery")
    amqp.delete_queue(doomed_queue)  # the broker cancels the worker's consumer
    wait_until(lambda: f"the broker cancelled consuming {doomed_queue}" in worker.log_text(), 10,
               message="the consumer cancel")
    second = schedule(api, other, 0.5)
    wait_until(lambda: status_of(second) == Status.DELIVERED, 20, message="delivery after the cancel")
    assert worker.process.poll() is None, "worker died"
    assert "Unrecoverable error" not in worker.log_text()
