"""On a private broker node with a 5 s consumer_timeout, checked every second (RabbitMQ's
channel_tick_interval; once a minute by default) — scaled down from the default 30 min: a plain
Celery countdown longer than that is held unacked by its worker and the broker's 406
PRECONDITION_FAILED kills the worker; the same countdown through the platform waits in the
cascade, where nothing is unacked, and runs once, on time."""

import pytest

from harness.platform import platform
from harness.rabbit_node import PrivateRabbit
from harness.waiting import wait_until

pytestmark = pytest.mark.broker
COUNTDOWN = 20  # well past the timeout and its first checks
SCHEDULE = (
    "from harness.testapp.tasks import plain_receipt, delayed_receipt; "
    f"print(plain_receipt.apply_async(args=['plain'], countdown={COUNTDOWN}, queue='plain').id, "
    f"delayed_receipt.apply_async(args=['platform'], countdown={COUNTDOWN}).id)"
)


def test_countdown_past_the_consumer_timeout_kills_plain_celery_but_not_the_platform():
    with PrivateRabbit(consumer_timeout_ms=5000, channel_tick_ms=1000) as node, \
            platform(web_workers=0, broker_url=node.url, settings="delayplatform.settings_test") as p:
        plain_worker = p.start_worker(name="plain", concurrency=1, beat=False, extra_args=("-Q", "plain"))
        platform_worker = p.start_worker(name="platform", concurrency=2)
        plain_id, delayed_id = p.manage("shell", "-c", SCHEDULE).split()[-2:]

        def ran(task_id):
            return p.sql("SELECT count(*) FROM testapp_receipt WHERE message_id = %s", f"{task_id}#0")[0][0]

        wait_until(lambda: plain_worker.process.poll() is not None, COUNTDOWN, 1, "the plain worker to be killed")
        assert "Unrecoverable error: PreconditionFailed" in plain_worker.log_text()
        assert "delivery acknowledgement on channel 1 timed out" in plain_worker.log_text()
        assert not ran(plain_id)

        wait_until(lambda: ran(delayed_id), COUNTDOWN, 0.5, "the platform task to run")
        assert ran(delayed_id) == 1 and platform_worker.process.poll() is None
        assert "PRECONDITION_FAILED" not in platform_worker.log_text()
        due, delivered, count = p.sql(
            "SELECT due_at, delivered_at, delivery_count FROM scheduling_scheduledmessage WHERE idempotency_key = %s",
            delayed_id)[0]
        assert delivered >= due and count == 1
        print(f"plain Celery worker killed by the consumer timeout; the platform task ran once, "
              f"{(delivered - due).total_seconds() * 1000:.0f} ms after due")
