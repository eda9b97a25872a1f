"""Flow control by key for real (docs/guides/flow-control.md "By key"): a key limited to 5 a second
under a load of 50 a second is handed over at 5 a second, while another key's messages and
messages without a key, due at the same time to the same endpoint, go on time; a webhook limited
to 2 calls at once per key never sees more than 2 of one key at once, while keys run beside each
other."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from harness.recording_server import RecordingServer
from harness.waiting import wait_until
from harness.windows import most_in_window
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status
RATE, HOT = 5, 25  # 25 messages of one key, due within half a second (50 a second): ~5 s at 5 a second


def test_a_key_limited_to_5_a_second_under_50_a_second_holds_back_only_itself(platform, worker, endpoint_name,
                                                                               create_endpoint, schedule_bulk):
    assert create_endpoint(max_deliveries_per_second_per_key=RATE)["max_deliveries_per_second_per_key"] == RATE
    start = timezone.now() + timedelta(seconds=3)

    def at(ms: int) -> str:
        return (start + timedelta(milliseconds=ms)).isoformat()

    schedule_bulk([{"endpoint": endpoint_name, "payload": {"n": n}, "flow_key": "hot", "deliver_at": at(n * 20)}
                   for n in range(HOT)]  # 50 a second
             + [{"endpoint": endpoint_name, "payload": {}, "flow_key": "calm", "deliver_at": at(n * 250)}
                for n in range(3)]  # within its own 5 a second
             + [{"endpoint": endpoint_name, "payload": {}, "deliver_at": at(n * 100)} for n in range(5)])  # no key
    rows = ScheduledMessage.objects.filter(endpoint__name=endpoint_name)
    wait_until(lambda: rows.filter(status=Status.DELIVERED).count() == HOT + 8, 60, 0.5, "every message delivered")
    assert set(rows.values_list("delivery_count", flat=True)) == {1}  # no rescue copy of a message waiting its turn
    delivered = {key: list(rows.filter(flow_key=key).values_list("delivered_at", "throttled_ms", "lateness_ms"))
                 for key in ("hot", "calm", None)}  # None: flow_key IS NULL
    hot = [at.timestamp() for at, *_ in delivered["hot"]]
    span = max(hot) - min(hot)
    print(f"\nflow control by key: {HOT} of one key over {span:.2f} s, most in one second "
          f"{most_in_window(hot, 1.0)}; the others' lateness "
          f"{sorted(late for key in ('calm', None) for *_, late in delivered[key])} ms")
    # the same margin as tests/e2e/test_flow_control.py: no 5 s window above 5 x the rate
    assert most_in_window(hot, 5.0) <= 5 * RATE
    assert span >= (HOT - 1) / RATE * 0.9, span  # spaced at the rate (unlimited: half a second)
    assert max(throttled or 0 for _, throttled, _ in delivered["hot"]) >= 3000
    for key in ("calm", None):  # not held back by the hot key
        assert len(delivered[key]) == (3 if key else 5)
        assert all(late < 1000 and (throttled or 0) < 500 for _, throttled, late in delivered[key]), delivered[key]


def test_a_webhook_never_sees_more_than_its_per_key_concurrency_of_one_key(platform, worker, endpoint_name,
                                                                            create_endpoint, schedule_bulk):
    with RecordingServer(hold_seconds=0.2, key_of=lambda body: json.loads(body)["key"]) as server:
        create_endpoint(handler="webhook", handler_target=server.url, max_concurrent_per_key=2)
        due = (timezone.now() + timedelta(seconds=3)).isoformat()
        schedule_bulk([{"endpoint": endpoint_name, "payload": {"key": key, "n": n}, "flow_key": key,
                        "deliver_at": due} for key in ("a", "b", "c") for n in range(6)])
        rows = ScheduledMessage.objects.filter(endpoint__name=endpoint_name)
        wait_until(lambda: rows.filter(status=Status.DELIVERED).count() == 18, 60, 0.5, "every message delivered")
        print(f"\nflow control by key, webhook: most at once per key {server.most_in_flight_by}, "
              f"in all {server.most_in_flight}")
        assert len(server.requests) == 18
        assert server.most_in_flight_by == {"a": 2, "b": 2, "c": 2}  # never more than 2 of a key at once
        assert server.most_in_flight > 2  # the keys run beside each other
