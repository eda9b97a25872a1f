"""Which brokers get the platform's policy against quorum queues' delivery limit (rabbit/redelivery.py), pure."""

import time
import uuid
from urllib.parse import quote

import pytest

from harness.vhosts import vhost_own
from rabbit.errors import ManagementUnavailable
from rabbit.redelivery import fix_command, limited_queues, limits_redelivery, redelivery_policy_ensure


@pytest.mark.parametrize("version, limited", [("3.10.8", False), ("3.13.7", False), ("4.0.5", True),
                                              ("4.3.0-rc.1", True), ("10.0", True), ("", False), ("unknown", False)])
def test_only_4_x_and_later_limit_redelivery(version, limited):
    assert limits_redelivery(version) is limited


class Recording:
    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def put_policy(self, vhost, name, body):
        if self.fail:
            raise ManagementUnavailable("cannot reach the RabbitMQ management API at http://x/api")
        self.calls.append((vhost, name, body))


def test_the_policy_is_put_on_4_x_only():
    management = Recording()
    assert redelivery_policy_ensure(management=management, vhost="/", version="3.10.8") is False
    assert management.calls == []
    assert redelivery_policy_ensure(management=management, vhost="dp", version="4.0.5") is True
    [(vhost, name, body)] = management.calls
    assert (vhost, name) == ("dp", "dp-unlimited-redelivery")
    assert body == {"pattern": ".*", "apply-to": "quorum_queues", "definition": {"delivery-limit": -1}, "priority": 0}


def test_an_unreachable_management_api_says_what_to_run_by_hand():
    with pytest.raises(ManagementUnavailable) as raised:
        redelivery_policy_ensure(management=Recording(fail=True), vhost="dp", version="4.0.5")
    assert "RabbitMQ 4.0.5 drops a quorum queue's message handed back 20 times" in str(raised.value)
    assert str(raised.value).endswith(fix_command("dp"))
    assert fix_command("dp") == ("rabbitmqctl set_policy --vhost dp --apply-to quorum_queues --priority 0 "
                                 "dp-unlimited-redelivery '.*' '{\"delivery-limit\": -1}'")


def test_limited_queues_are_quorum_queues_with_a_number():
    assert limited_queues([{"name": "b", "type": "quorum", "delivery_limit": 20},
                           {"name": "a", "type": "quorum", "delivery_limit": 5},
                           {"name": "c", "type": "quorum", "delivery_limit": "unlimited"},
                           {"name": "d", "type": "classic", "delivery_limit": 20}]) == ["a", "b"]


# --- on the broker: what the test run's RabbitMQ does (3.10.8 in make test, 4.0.5 in make test-rabbitmq4) --

HANDED_BACK = 25


def take(reader, seconds: float):
    """The queue's message within ``seconds`` (a requeued one is back within milliseconds), or None."""
    deadline = time.monotonic() + seconds
    while True:
        got = reader.get(1)
        if got or time.monotonic() > deadline:
            return got[0] if got else None
        time.sleep(0.01)


def hand_back(session, queue: str, times: int) -> int:
    """Take the queue's one message and reject it with requeue, ``times`` times or until it is
    gone; returns how often it was received."""
    received = 0
    with session.reader(queue) as reader:
        for _ in range(times):
            got = take(reader, 3)
            if got is None:
                break
            received += 1
            reader.reject(got, requeue=True)
    return received


@pytest.mark.broker
def test_a_message_handed_back_25_times_is_kept_on_every_series(rabbit_vhost):
    """Measures 4.0's quorum delivery limit (a message handed back 20 times is gone at its 21st
    delivery) and that the platform's policy, set where the broker reports 4.x, keeps it; on 3.x
    nothing is set and nothing is dropped."""
    from rabbit import Broker
    from scheduling.config.conf import broker
    from tests.topology.helpers import publish
    from topology import cascade

    vhost = f"dp-test-redelivery-{uuid.uuid4().hex[:6]}"
    base = broker()
    url = base.url.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")
    with vhost_own(management=base.management, vhost=vhost), Broker(url, base.management_url).session() as session:
        version = session.server_version

        def trial(name):
            session.declare_queue(cascade.endpoint_queue(name, "quorum"))
            publish(session, "", name)
            received = hand_back(session, name, HANDED_BACK)
            with session.reader(name) as reader:
                last = take(reader, 3)
                if last is not None:
                    reader.ack(last)
            return received, last is not None

        without = trial("without-policy")
        assert redelivery_policy_ensure(management=base.management, vhost=vhost, version=version) \
            is limits_redelivery(version)
        with_policy = trial("with-policy")
        print(f"\nRabbitMQ {version}: without the policy received {without[0]} times, then there: {without[1]}; "
              f"with it {with_policy[0]}, then there: {with_policy[1]}")
    if limits_redelivery(version):
        assert without == (21, False)  # the 4.0 default: the 21st delivery was its last
    else:
        assert without == (HANDED_BACK, True)
    assert with_policy == (HANDED_BACK, True)
