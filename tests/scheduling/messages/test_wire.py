"""How a row is put on the wire: whole units through the cascade (minus the arrival margin),
an ordinary Celery task message with eta = due time, and the x-dp headers; and how the wire is
read back (the delivery loop's messages, messages found in a level queue)."""

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from scheduling.core.clock import to_epoch_ms
from scheduling.messages import wire
from scheduling.models import Endpoint, ScheduledMessage, Team, TopologyVersion
from topology import cascade

TEAM = Team(pk=1, name="default")  # an unsaved row's team: no query for the default

V2 = cascade.V2
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)
NOW_MS = to_epoch_ms(NOW)


@pytest.mark.parametrize(
    ("remaining_ms", "seconds"),
    [(0, 0), (-5000, 0), (250, 0), (1249, 0), (1250, 1), (10_000, 9), (10_250, 10), (10_251, 10)],
)
def test_cascade_carries_whole_seconds_minus_the_margin(remaining_ms, seconds):
    assert wire.cascade_units(NOW_MS + remaining_ms, NOW_MS, V2, margin_ms=250) == seconds


def test_cascade_units_never_exceed_the_maximum():
    assert wire.cascade_units(NOW_MS + 10**15, NOW_MS, V2, margin_ms=0) == V2.max_delay_units


def test_outgoing_is_a_celery_task_message_through_the_cascade():
    endpoint = Endpoint(team=TEAM, name="billing", queue="billing", topology=TopologyVersion(name="v2", prefix="dp.v2.", levels=28))
    message = ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, payload={"a": 1},
                               due_at=NOW + timedelta(seconds=10, milliseconds=500), requested_delay_ms=10_500)
    out, route = wire.outgoing(message, V2, NOW, margin_ms=250)
    assert route.delay_units == 10
    assert out.exchange == "dp.v2.delay-level-03"
    assert out.routing_key == "0." * 24 + "1.0.1.0.billing"
    assert out.headers["task"] == "scheduling.deliver" and out.headers["id"] == str(message.id)
    assert out.headers["eta"] == "2026-11-21T12:00:10.500000+00:00"
    assert out.headers[wire.H_DUE_AT_MS] == NOW_MS + 10_500
    assert out.headers[wire.H_VERSION] == "v2" and out.routing_key.endswith(".billing")
    assert out.headers[wire.H_DELAY_MS] == 10_000 and out.headers[wire.H_PUBLISHED_AT_MS] == NOW_MS
    args, kwargs, _embed = json.loads(out.body)
    assert args == [str(message.id)] and kwargs == {}
    assert out.properties["correlation_id"] == str(message.id)
    assert out.properties["content_type"] == "application/json"


# --- reading messages found in a level queue -----------------------------------------------

KEY_10S = cascade.routing_key(10, "billing")


@pytest.mark.parametrize(
    ("headers", "properties", "key", "due"),
    [
        ({wire.H_DUE_AT_MS: 5_000, wire.H_PUBLISHED_AT_MS: 1_000, wire.H_DELAY_MS: 3_000}, {}, KEY_10S, 5_000),
        ({wire.H_PUBLISHED_AT_MS: 1_000, wire.H_DELAY_MS: 3_000}, {}, KEY_10S, 4_000),  # arrival + delay
        ({wire.H_PUBLISHED_AT_MS: 1_000}, {}, KEY_10S, 11_000),  # arrival + the key's delay
        ({}, {"timestamp": datetime(1970, 1, 1, 0, 0, 2, tzinfo=timezone.utc)}, KEY_10S, 12_000),
        ({}, {"timestamp": 2}, KEY_10S, 12_000),  # AMQP timestamps are seconds
        ({}, {}, KEY_10S, None),  # no arrival time: poison
        ({wire.H_DELAY_MS: 3_000}, {}, KEY_10S, None),
        ({wire.H_PUBLISHED_AT_MS: 1_000}, {}, "not.a.key", None),  # no delay, no destination
        ({wire.H_DUE_AT_MS: 5_000}, {}, "garbage", None),  # nowhere to send it
        ({wire.H_DUE_AT_MS: "5000"}, {}, KEY_10S, None),  # wrong type is not trusted
    ],
)
def test_read_found_falls_back_from_due_to_arrival_plus_delay(headers, properties, key, due):
    assert wire.read_found(headers, properties, key, V2).due_at_ms == due


def test_read_found_takes_destination_and_id():
    found = wire.read_found({wire.H_DUE_AT_MS: 1, wire.H_MESSAGE_ID: "abc"}, {}, KEY_10S, V2)
    assert (found.destination, found.message_id) == ("billing", "abc")


def test_moved_strips_x_death_and_restamps_headers():
    found = wire.Found(due_at_ms=NOW_MS + 60_000, destination="billing", message_id="m1", published_at_ms=1)
    headers = {"x-death": [{"queue": "dp.delay-level-05"}], "x-first-death-queue": "q", "task": "scheduling.deliver",
               "eta": "2026-11-21T12:01:00+00:00", wire.H_VERSION: "v1", wire.H_DUE_AT_MS: NOW_MS + 60_000}
    out, route = wire.moved(headers, {"correlation_id": "m1", "delivery_mode": 2}, b"body", found, V2, NOW_MS,
                            margin_ms=250)
    assert "x-death" not in out.headers and "x-first-death-queue" not in out.headers
    assert out.headers["task"] == "scheduling.deliver" and out.headers[wire.H_VERSION] == "v2"
    assert out.headers[wire.H_PUBLISHED_AT_MS] == NOW_MS and out.headers[wire.H_DELAY_MS] == 59_000
    assert route.delay_units == 59 and out.exchange == "dp.v2.delay-level-05"
    assert out.body == b"body" and out.properties == {"correlation_id": "m1"}


def test_overdue_message_moves_straight_to_delivery():
    found = wire.Found(due_at_ms=NOW_MS - 5, destination="billing", message_id=None, published_at_ms=None)
    out, route = wire.moved({}, {}, b"", found, V2, NOW_MS, margin_ms=250)
    assert route.delay_units == 0 and out.exchange == "dp.v2.delay-delivery"


def test_a_message_without_eta_is_never_moved_to_arrive_early():
    """A user's Celery task or a foreign message is not held by its consumer: round up."""
    found = wire.Found(due_at_ms=NOW_MS + 59_001, destination="celery", message_id=None, published_at_ms=None)
    _, route = wire.moved({"task": "billing.charge", "eta": None}, {}, b"", found, V2, NOW_MS, margin_ms=250)
    assert route.delay_units == 60


@pytest.mark.parametrize(("remaining_ms", "held", "seconds"),
                         [(10_001, False, 11), (10_000, False, 10), (1, False, 1), (0, False, 0), (-5, False, 0),
                          (10_001, True, 9)])
def test_held_messages_leave_early_others_round_up(remaining_ms, held, seconds):
    assert wire.cascade_units(NOW_MS + remaining_ms, NOW_MS, V2, margin_ms=250, held=held) == seconds


# --- reading what the delivery loop consumes ---------------------------------------------------

ID = "0cdf3491-d87a-494f-b066-4f72ae9032d2"
ETA = "2026-11-21T12:00:10.500000+00:00"
ETA_MS = NOW_MS + 10_500


def deliver(attempt=0, **headers):
    body, built, _ = wire.deliver_message(ID, datetime.fromisoformat(ETA), attempt)
    built.pop("eta")
    return {**built, **headers}, body


@pytest.mark.parametrize(
    ("headers", "attempt", "due_ms", "stamped"),
    [
        ({wire.H_DUE_AT_MS: ETA_MS, "eta": ETA}, 0, ETA_MS, True),  # the platform's own header
        ({wire.H_DUE_AT_MS: 7, "eta": ETA}, 0, 7, True),  # ... wins over the eta
        ({"eta": ETA}, 0, ETA_MS, False),  # another producer: Celery's eta
        ({}, 0, NOW_MS, False),  # neither: due now
        ({wire.H_DUE_AT_MS: "7", "eta": ETA}, 0, ETA_MS, False),  # a header of the wrong type is not trusted
        ({wire.H_DUE_AT_MS: True}, 0, NOW_MS, False),
        ({"eta": "not a date"}, 0, NOW_MS, False),
        ({"eta": "2026-11-21T12:00:10"}, 0, NOW_MS, False),  # naive: cannot be placed in UTC
        ({wire.H_DUE_AT_MS: NOW_MS - 60_000, "eta": ETA}, 2, ETA_MS, True),  # a retry waits for its own eta
        ({wire.H_DUE_AT_MS: ETA_MS + 1, "eta": ETA}, 1, ETA_MS + 1, True),
    ],
)
def test_read_delivery_finds_the_due_time(headers, attempt, due_ms, stamped):
    headers, body = deliver(attempt, **headers)
    delivery = wire.read_delivery(headers, body, NOW_MS)
    assert delivery == wire.Delivery(ID, attempt, due_ms, stamped)
    # what tells a rescheduled message's old copy apart: only a due time the platform stamped
    assert delivery.stamped_due_ms == (due_ms if stamped else None)


@pytest.mark.parametrize(
    ("task", "body"),
    [
        ("billing.charge", json.dumps([[ID], {}, {}]).encode()),  # another task: not ours
        (None, json.dumps([[ID], {}, {}]).encode()),
        ("scheduling.deliver", b"not json"),
        ("scheduling.deliver", json.dumps([[], {}, {}]).encode()),  # no id
        ("scheduling.deliver", json.dumps([[ID], {"attempt": "x"}, {}]).encode()),
        ("scheduling.deliver", json.dumps({"args": [ID]}).encode()),
        ("scheduling.deliver", json.dumps([[ID], [], {}]).encode()),
    ],
)
def test_read_delivery_refuses_what_is_not_a_delivery(task, body):
    assert wire.read_delivery({"task": task, wire.H_DUE_AT_MS: NOW_MS}, body, NOW_MS) is None


def test_retry_goes_back_where_the_message_came_from_with_its_headers():
    from rabbit import Received

    came = Received(tag=1, body=b"", headers={wire.H_DUE_AT_MS: 5, wire.H_VERSION: "v2", "task": "x"},
                    exchange="dp.v2.delay-delivery", routing_key="0.1.billing", queue="billing")
    out = wire.retry(came, ID, 2, datetime.fromisoformat(ETA))
    assert (out.exchange, out.routing_key) == ("dp.v2.delay-delivery", "0.1.billing")
    assert out.headers[wire.H_DUE_AT_MS] == 5 and out.headers[wire.H_VERSION] == "v2"
    assert wire.read_delivery(out.headers, out.body, NOW_MS) == wire.Delivery(ID, 2, ETA_MS)


# --- v3: the destination as routing key, the bits as CC keys -----------------------------------

V3 = cascade.V3


def test_v3_outgoing_carries_the_bits_as_cc_keys_and_the_name_as_routing_key():
    endpoint = Endpoint(team=TEAM, name="orders.eu", queue="orders.eu", topology=TopologyVersion(name="v3", prefix="dp.v3.", levels=28))
    message = ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, payload={},
                               due_at=NOW + timedelta(seconds=10, milliseconds=500), requested_delay_ms=10_500)
    out, route = wire.outgoing(message, V3, NOW, margin_ms=250)
    assert (route.delay_units, out.exchange, out.routing_key) == (10, "dp.v3.delay-level-03", "orders.eu")
    assert out.headers["CC"] == ["bit:03", "bit:01"] and out.headers[wire.H_VERSION] == "v3"
    due_now = ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, payload={}, due_at=NOW, requested_delay_ms=0)
    out, route = wire.outgoing(due_now, V3, NOW, margin_ms=250)
    assert (out.exchange, out.routing_key) == ("dp.v3.delay-delivery", "orders.eu") and "CC" not in out.headers


def test_v3_read_found_takes_the_delay_from_the_cc_keys_and_the_name_from_the_key():
    found = wire.read_found({wire.H_PUBLISHED_AT_MS: 1_000, "CC": ["bit:03", "bit:01"]}, {}, "orders.eu", V3)
    assert (found.due_at_ms, found.destination) == (11_000, "orders.eu")
    assert wire.read_found({wire.H_PUBLISHED_AT_MS: 1_000, "CC": ["b03"]}, {}, "orders.eu", V3).due_at_ms is None
    assert wire.read_found({wire.H_DUE_AT_MS: 5}, {}, "not..a.name", V3).due_at_ms is None


@pytest.mark.parametrize(("source", "target"), [(V3, V2), (V2, V3), (V3, V3)])
def test_moved_between_versions_routes_by_the_targets_rules_only(source, target):
    """The old version's CC keys are dropped; the target's are added (or none, on v2)."""
    found = wire.Found(due_at_ms=NOW_MS + 60_000, destination="billing", message_id="m1", published_at_ms=1)
    old = wire.route(NOW_MS + 60_000, NOW_MS - 20_000, source, "billing", margin_ms=250)
    headers = {"task": "scheduling.deliver", "eta": "2026-11-21T12:01:00+00:00", **old.headers}
    out, route = wire.moved(headers, {}, b"", found, target, NOW_MS, margin_ms=250)
    assert route == cascade.route(target, 59, "billing")
    assert out.headers.get("CC") == (list(route.cc) or None)
    assert out.routing_key == route.routing_key


# --- shards: a message travels on the shard its id picks ---------------------------------------

V3X3 = V3.with_(shards=3)


def test_outgoing_goes_into_the_shard_of_its_id_for_every_shard():
    endpoint = Endpoint(team=TEAM, name="billing", queue="billing", topology=TopologyVersion(name="v3", prefix="dp.v3.", levels=28))
    seen = set()
    for n in range(12):
        message = ScheduledMessage(id=uuid.UUID(int=n), endpoint=endpoint, payload={},
                                   due_at=NOW + timedelta(seconds=10, milliseconds=500), requested_delay_ms=10_500)
        out, route = wire.outgoing(message, V3X3, NOW, margin_ms=250)
        shard = n % 3
        assert out.exchange == route.exchange == cascade.level_name("dp.v3.", 3, shard)
        assert route == cascade.route(V3X3, 10, "billing", shard) and out.headers["CC"] == ["bit:03", "bit:01"]
        seen.add(shard)
    assert seen == {0, 1, 2}


def test_the_message_page_shows_the_path_on_the_messages_shard(settings):
    settings.DELAY_SHARDS = "v3=3"  # the row's cascade is the configured one
    endpoint = Endpoint(team=TEAM, name="billing", queue="billing", topology=TopologyVersion(name="v3", prefix="dp.v3.", levels=28))
    message = ScheduledMessage(id=uuid.UUID(int=5), endpoint=endpoint, topology=endpoint.topology, payload={},
                               due_at=NOW + timedelta(seconds=10, milliseconds=500), requested_delay_ms=10_500)
    shown = wire.preview(message, NOW, margin_ms=250)
    assert shown.exchange == "dp.v3.delay-level-03-s2"  # 5 % 3
    assert [row[0] for row in shown.path_rows][:2] == ["Level 03, shard 2", "Level 02, shard 2"]


def test_moved_goes_into_the_targets_shard_of_the_id_or_of_the_amqp_message_id():
    eta = {"eta": "2026-11-21T12:01:00+00:00"}
    for n in range(6):
        found = wire.Found(due_at_ms=NOW_MS + 60_000, destination="billing", message_id=str(uuid.UUID(int=n)),
                           published_at_ms=1)
        out, route = wire.moved(eta, {}, b"", found, V3X3, NOW_MS, margin_ms=250)
        assert out.exchange == cascade.level_name("dp.v3.", 5, n % 3)
    foreign = wire.Found(due_at_ms=NOW_MS + 60_000, destination="billing", message_id=None, published_at_ms=1)
    out, _ = wire.moved(eta, {"message_id": "task-42"}, b"", foreign, V3X3, NOW_MS, margin_ms=250)
    assert out.exchange == cascade.level_name("dp.v3.", 5, cascade.shard_of("task-42", 3))
    out, _ = wire.moved(eta, {}, b"", foreign, V3X3, NOW_MS, margin_ms=250)
    assert out.exchange == "dp.v3.delay-level-05"  # no id at all: shard 0


# --- envelopes (DELAY_ENVELOPES): one broker message, many messages ----------------------------


def rows_on(version_name: str, *offsets_ms: int, handler=Endpoint.Handler.NONE) -> list[ScheduledMessage]:
    endpoint = Endpoint(team=TEAM, name="orders", queue="orders", handler=handler,
                        topology=TopologyVersion(name=version_name, prefix=f"dp.{version_name}.", levels=28))
    return [ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, payload={}, requested_delay_ms=ms,
                             due_at=NOW + timedelta(milliseconds=ms)) for ms in offsets_ms]


def test_an_envelope_is_timed_by_its_earliest_message_and_carries_each_id_and_due_time():
    rows = rows_on("v3", 10_900, 10_500, 10_700)
    out, route = wire.outgoing_envelope(rows, V3, NOW, margin_ms=250)
    single, single_route = wire.outgoing(rows[1], V3, NOW, margin_ms=250)  # the earliest, alone
    assert (out.exchange, out.routing_key, out.headers["CC"]) == (single.exchange, single.routing_key, single.headers["CC"])
    assert route.delay_units == single_route.delay_units == 10
    assert out.headers["task"] == wire.ENVELOPE_TASK and out.headers[wire.H_ENVELOPE] == 3
    assert out.headers[wire.H_DUE_AT_MS] == NOW_MS + 10_500 and wire.H_MESSAGE_ID not in out.headers
    assert out.properties["message_id"] == out.headers["id"]  # unique per envelope: returns are matched by it
    assert wire.read_deliveries(out.headers, out.body, NOW_MS) == [
        wire.Delivery(str(r.id), 0, r.due_at_ms) for r in rows]
    assert wire.envelope_ids(out.headers, out.body) == [str(r.id) for r in rows]
    assert wire.read_delivery(out.headers, out.body, NOW_MS) is None  # not a scheduling.deliver message


def test_only_rows_of_one_version_shard_endpoint_and_second_share_an_envelope():
    a, b, c = rows_on("v3", 10_000, 10_999, 11_000)
    assert wire.envelope_key(a, V3) == wire.envelope_key(b, V3) != wire.envelope_key(c, V3)
    assert wire.envelope_key(rows_on("v2", 0)[0], V2) is None  # v1 and v2 stay one message per broker message
    celery_queue = rows_on("v3", 0, handler=Endpoint.Handler.CELERY_QUEUE)[0]
    assert wire.envelope_key(celery_queue, V3) is None  # a user's task message travels as it is
    sharded = V3.with_(shards=4)
    keys = {wire.envelope_key(row, sharded) for row in rows_on("v3", *[10_000] * 40)}
    assert {key[1] for key in keys} == {0, 1, 2, 3}


def test_a_retry_of_an_envelope_s_message_is_a_message_of_its_own():
    from rabbit import Received

    rows = rows_on("v3", 10_500, 10_700)
    out, _ = wire.outgoing_envelope(rows, V3, NOW, margin_ms=250)
    came = Received(tag=1, body=out.body, headers=out.headers, exchange="dp.v3.delay-delivery", routing_key="orders",
                    queue="orders")
    retry = wire.retry(came, str(rows[1].id), 1, datetime.fromisoformat(ETA))
    assert retry.headers["task"] == wire.DELIVER_TASK and wire.H_ENVELOPE not in retry.headers
    assert retry.headers[wire.H_MESSAGE_ID] == str(rows[1].id)
    assert wire.read_deliveries(retry.headers, retry.body, NOW_MS) == [wire.Delivery(str(rows[1].id), 1, ETA_MS)]


@pytest.mark.parametrize("body", [b"", b"[[[]],{},{}]", b'[[[["id"]]],{},{}]', b'[[[["id", "soon"]]],{},{}]'])
def test_a_broken_envelope_is_not_read(body):
    assert wire.read_deliveries({"task": wire.ENVELOPE_TASK}, body, NOW_MS) is None


# --- the raw Celery path: only a task message the platform captured ------------------------------

CAPTURED = {"celery": {"task": "billing.remind", "queue": "billing", "content_type": "application/json",
                       "content_encoding": "utf-8", "body": '[[42],{},{}]',
                       "headers": {"task": "billing.remind", "id": "t-1", "CC": ["dp.relay"]}, "properties": {}}}


def task_row(payload, *, captured_task, key=None) -> ScheduledMessage:
    endpoint = Endpoint(team=TEAM, name="billing", queue="billing", handler=Endpoint.Handler.CELERY_QUEUE,
                        topology=TopologyVersion(name="v2", prefix="dp.v2.", levels=28))
    row = ScheduledMessage(id=uuid.uuid4(), endpoint=endpoint, payload=payload, idempotency_key=key, due_at=NOW,
                           requested_delay_ms=0)
    row.captured_task = captured_task  # as the row says it (NULL: a row of the release before the column)
    return row


@pytest.mark.parametrize(("captured_task", "key"), [
    (True, "t-1"),  # DelayedTask's, stored so
    (None, "t-1"),  # made by the release before the column: its key is the captured task's id
    (None, "t-1#retry2"),  # a delayed retry of it
])
def test_a_captured_task_goes_as_it_was_captured(captured_task, key):
    out, _ = wire.outgoing(task_row(CAPTURED, captured_task=captured_task, key=key), V2, NOW, margin_ms=250)
    assert out.body == b"[[42],{},{}]" and out.headers["task"] == "billing.remind" and out.headers["eta"] is None
    assert "CC" not in out.headers or out.headers["CC"] != ["dp.relay"]  # never its own routing headers


@pytest.mark.parametrize(("captured_task", "key"), [
    (False, "t-1"),  # a caller's payload, whatever its shape
    (None, None),  # an old row whose key is not the task's id: not DelayedTask's
    (None, "other"),
])
def test_a_payload_shaped_as_a_capture_is_no_task_unless_the_platform_captured_it(captured_task, key):
    with pytest.raises(wire.Unbuildable, match="its payload is not a Celery task for queue 'billing'"):
        wire.outgoing(task_row(CAPTURED, captured_task=captured_task, key=key), V2, NOW, margin_ms=250)


@pytest.mark.parametrize("payload", [{"n": 1}, [1, 2], "text", {"celery": "x"}])
def test_a_celery_queue_row_that_is_no_task_is_unbuildable_with_the_reason(payload):
    with pytest.raises(wire.Unbuildable, match="not a Celery task"):
        wire.outgoing(task_row(payload, captured_task=False), V2, NOW, margin_ms=250)


def test_a_broken_capture_is_unbuildable_not_a_crash():
    broken = {"celery": {**CAPTURED["celery"], "content_encoding": "no-such-codec"}}
    with pytest.raises(wire.Unbuildable, match="LookupError"):
        wire.outgoing(task_row(broken, captured_task=True, key="t-1"), V2, NOW, margin_ms=250)


# --- W3C traceparent (docs/observability/tracing.md) -----------------------------------------

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_message_without_a_traceparent_goes_out_as_before():
    """v1/v2 copies keep NServiceBus's shape: no header is added unless the row has a trace."""
    (row,) = rows_on("v2", 10_500)
    out, _ = wire.outgoing(row, V2, NOW, margin_ms=250)
    assert wire.H_TRACEPARENT not in out.headers and wire.H_TRACEPARENTS not in out.headers
    row.traceparent = TRACEPARENT
    traced, _ = wire.outgoing(row, V2, NOW, margin_ms=250)
    assert {k: v for k, v in traced.headers.items() if k != wire.H_TRACEPARENT} == out.headers
    assert traced.headers[wire.H_TRACEPARENT] == TRACEPARENT and traced.body == out.body


def test_the_relays_publish_span_is_what_the_copy_carries():
    (row,) = rows_on("v3", 10_500)
    row.traceparent = TRACEPARENT
    row.wire_traceparent = publish = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
    out, _ = wire.outgoing(row, V3, NOW, margin_ms=250)
    assert out.headers[wire.H_TRACEPARENT] == publish


def test_a_celery_queue_task_carries_the_traceparent_in_its_headers():
    (row,) = rows_on("v3", 10_500, handler=Endpoint.Handler.CELERY_QUEUE)
    row.payload, row.captured_task, row.traceparent = {"task": "app.add", "args": [1], "kwargs": {}}, False, TRACEPARENT
    out, _ = wire.outgoing(row, V3, NOW, margin_ms=250)
    assert out.headers["task"] == "app.add" and out.headers[wire.H_TRACEPARENT] == TRACEPARENT


def test_an_envelope_carries_each_traced_messages_traceparent_and_its_retry_keeps_it():
    from rabbit import Received

    rows = rows_on("v3", 10_500, 10_700)
    rows[1].traceparent = TRACEPARENT
    out, _ = wire.outgoing_envelope(rows, V3, NOW, margin_ms=250)
    assert out.headers[wire.H_TRACEPARENTS] == {str(rows[1].id): TRACEPARENT}
    assert wire.H_TRACEPARENT not in out.headers
    assert wire.traceparent_of(out.headers, str(rows[1].id)) == TRACEPARENT
    assert wire.traceparent_of(out.headers, str(rows[0].id)) is None
    came = Received(tag=1, body=out.body, headers=out.headers, exchange="dp.v3.delay-delivery", routing_key="orders",
                    queue="orders")
    retry = wire.retry(came, str(rows[1].id), 1, NOW)
    assert retry.headers[wire.H_TRACEPARENT] == TRACEPARENT and wire.H_TRACEPARENTS not in retry.headers
    assert wire.H_TRACEPARENT not in wire.retry(came, str(rows[0].id), 1, NOW).headers
    untraced, _ = wire.outgoing_envelope(rows_on("v3", 10_500, 10_700), V3, NOW, margin_ms=250)
    assert wire.H_TRACEPARENTS not in untraced.headers


def test_a_traceparent_read_off_the_wire_is_checked():
    assert wire.traceparent_of({wire.H_TRACEPARENT: TRACEPARENT}, "x") == TRACEPARENT
    assert wire.traceparent_of({wire.H_TRACEPARENT: "00-zz"}, "x") is None
    assert wire.traceparent_of({wire.H_TRACEPARENTS: ["not", "a", "dict"]}, "x") is None


def test_a_task_delayed_in_project_carries_the_traceparent_over_its_own_headers():
    """A captured task (DelayedTask) is published as apply_async built it, with the row's trace."""
    row = task_row(CAPTURED, captured_task=True, key="t-1")
    row.traceparent = TRACEPARENT
    out, _ = wire.outgoing(row, V2, NOW, margin_ms=250)
    assert out.headers["task"] == "billing.remind" and out.headers[wire.H_TRACEPARENT] == TRACEPARENT


def test_an_envelope_split_for_a_version_without_envelopes_keeps_each_messages_traceparent():
    """migrate_delays from v3 to v2: each message of the envelope becomes a deliver message of its
    own, with its entry of the envelope's map (none for the one without a trace)."""
    from rabbit import Received

    rows = rows_on("v3", 10_500, 10_700)
    rows[0].traceparent = TRACEPARENT
    out, _ = wire.outgoing_envelope(rows, V3, NOW, margin_ms=250)
    came = Received(tag=1, body=out.body, headers=out.headers, exchange=out.exchange, routing_key=out.routing_key,
                    queue="dp.v3.delay-level-03")
    found = wire.read_found(came.headers, came.properties, came.routing_key, V3)
    parts = wire.read_envelope(came.headers, came.body)
    singles = wire.moved_envelope(came, found, parts, V2, NOW_MS, margin_ms=250)
    carried = {message_id: single.headers.get(wire.H_TRACEPARENT) for single, _, message_id in singles}
    assert carried == {str(rows[0].id): TRACEPARENT, str(rows[1].id): None}
    assert all(wire.H_TRACEPARENTS not in single.headers for single, _, _ in singles)


# --- flow control by key (docs/guides/flow-control.md "By key") -----------------------------------


@pytest.mark.parametrize("version", [V2, V3])
def test_a_flow_key_travels_in_its_header_and_a_message_without_one_goes_out_as_before(version):
    (row,) = rows_on(version.name, 10_500)
    out, _ = wire.outgoing(row, version, NOW, margin_ms=250)
    assert wire.H_FLOW_KEY not in out.headers  # v1/v2 copies keep NServiceBus's shape
    row.flow_key = "customer-42"
    keyed, _ = wire.outgoing(row, version, NOW, margin_ms=250)
    assert {k: v for k, v in keyed.headers.items() if k != wire.H_FLOW_KEY} == out.headers and keyed.body == out.body
    assert keyed.headers[wire.H_FLOW_KEY] == "customer-42"
    assert wire.read_delivery(keyed.headers, keyed.body, NOW_MS).flow_key == "customer-42"
    assert wire.read_delivery(out.headers, out.body, NOW_MS).flow_key is None


def test_an_envelope_carries_each_keyed_messages_flow_key_and_a_retry_or_split_keeps_it():
    from rabbit import Received

    rows = rows_on("v3", 10_500, 10_700)
    rows[1].flow_key = "k"
    out, _ = wire.outgoing_envelope(rows, V3, NOW, margin_ms=250)
    assert out.headers[wire.H_FLOW_KEYS] == {str(rows[1].id): "k"} and wire.H_FLOW_KEY not in out.headers
    assert [d.flow_key for d in wire.read_deliveries(out.headers, out.body, NOW_MS)] == [None, "k"]
    came = Received(tag=1, body=out.body, headers=out.headers, exchange="dp.v3.delay-delivery", routing_key="orders",
                    queue="orders")
    retry = wire.retry(came, str(rows[1].id), 1, NOW)
    assert retry.headers[wire.H_FLOW_KEY] == "k" and wire.H_FLOW_KEYS not in retry.headers
    assert wire.H_FLOW_KEY not in wire.retry(came, str(rows[0].id), 1, NOW).headers
    found = wire.read_found(came.headers, came.properties, came.routing_key, V3)
    singles = wire.moved_envelope(came, found, wire.read_envelope(came.headers, came.body), V2, NOW_MS, margin_ms=250)
    assert {i: single.headers.get(wire.H_FLOW_KEY) for single, _, i in singles} == {str(rows[0].id): None,
                                                                                       str(rows[1].id): "k"}


@pytest.mark.parametrize("value", ["", "x" * 201, 42, ["k"], None])
def test_a_flow_key_read_off_the_wire_is_checked(value):
    assert wire.flow_key_of({wire.H_FLOW_KEY: value}, "m") is None
    assert wire.flow_key_of({wire.H_FLOW_KEY: "x" * 200}, "m") == "x" * 200
    assert wire.flow_key_of({wire.H_FLOW_KEYS: {"m": value}}, "m") is None
