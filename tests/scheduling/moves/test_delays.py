"""delays_move on the live broker: every message leaves the old cascade for the new one with
its due time intact, rows follow, unusable messages go to the poison queue, stale copies are
dropped, and a dry run moves nothing. Cascades are declared under this test's own prefixes."""

import uuid
from datetime import timedelta

import amqp as amqp_lib
import pytest
from django.utils import timezone

from harness.endpoints import bind_endpoint
from harness.vhosts import vhost_own
from scheduling.config.conf import broker
from scheduling.messages import wire
from scheduling.messages.relay import relay_publish
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.moves.delays import delays_move
from scheduling.versions.broker import topology_count_by_level
from tests.topology.helpers import get, publish
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
DELAYS = [900, 1000, 3600, 5000, 86_400, 2_000_000]  # long: nothing moves down during the test


@pytest.fixture
def setup(versions, declared, unique_prefix, endpoint_name, amqp):
    """v1 and v2 rows pointed at fresh cascades; an endpoint on v1 with messages in flight."""
    old = declared(cascade.V1, prefix=unique_prefix + "v1.")
    new = declared(cascade.V2, prefix=unique_prefix + "v2.")
    for row, plan in ((versions["v1"], old), (versions["v2"], new)):
        row.prefix = plan.version.prefix
        row.provisioned_at = timezone.now()
        row.save()
    for plan in (old, new):
        bind_endpoint(amqp, plan.version, endpoint_name)
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v1"])
    now = timezone.now()
    rows = [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v1"], payload={"d": d},
                                            due_at=now + timedelta(seconds=d), requested_delay_ms=d * 1000)
            for d in DELAYS]
    assert relay_publish(ids=[str(r.id) for r in rows]).published == len(rows)
    yield versions, old.version, new.version, rows
    amqp.delete_queue(endpoint_name)
    amqp.delete_queue(cascade.poison_queue(old.version).name)


def test_every_message_moves_with_its_due_time_and_rows_follow(setup, amqp):
    versions, old, new, rows = setup
    assert sum(topology_count_by_level(session=amqp, version=old).values()) == len(rows)
    started = timezone.now()
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=new,
                          target_row=versions["v2"], batch=4)
    assert (summary.found, summary.moved, summary.poisoned, summary.dropped, summary.failed) == (6, 6, 0, 0, 0)
    assert summary.rows_updated == 6 and summary.left_in_source == 0
    assert sum(topology_count_by_level(session=amqp, version=old).values()) == 0
    depths = topology_count_by_level(session=amqp, version=new)
    assert sum(depths.values()) == len(rows)
    for row in rows:
        row.refresh_from_db()
        assert row.topology == versions["v2"] and row.status == ScheduledMessage.Status.PUBLISHED
        level = int(row.first_exchange.rsplit("-", 1)[1])
        assert row.first_exchange == cascade.level_name(new.prefix, level)
        assert row.routing_key.endswith(row.endpoint.name)
        # the cascade holds whole seconds, a little less than what remained when the move took it
        # (never more than at the move's start; a busy machine may take seconds between the two)
        remaining = (row.due_at - timezone.now()).total_seconds()
        assert remaining - 2 < cascade.parse_routing_key(row.routing_key)[0] <= (row.due_at - started).total_seconds()
        message = get(amqp, cascade.level_name(new.prefix, level))
        assert message.headers[wire.H_DUE_AT_MS] == row.due_at_ms
        assert message.headers[wire.H_VERSION] == "v2" and "x-death" not in message.headers
        assert message.headers["eta"] == row.due_at.isoformat()


def test_message_without_a_usable_due_time_goes_to_the_poison_queue(setup, amqp):
    versions, old, new, rows = setup
    publish(amqp, cascade.first_exchange(old, 700), cascade.routing_key(700, "stranger", old.levels), b"who")
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=new, target_row=versions["v2"])
    assert (summary.moved, summary.poisoned) == (len(rows), 1)
    poisoned = get(amqp, cascade.poison_queue(old).name)
    assert poisoned.body == b"who" and "no x-dp-due-at-ms" in poisoned.headers["x-dp-poison-reason"]


def _republish(conn, message, exchange):
    channel = conn.conn.channel()
    channel.confirm_select()
    properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
    channel.basic_publish_confirm(amqp_lib.Message(message.body, application_headers=message.headers, **properties),
                                  exchange, message.delivery_info["routing_key"])
    channel.close()


def test_stale_copy_of_a_moved_message_is_dropped_not_moved_again(setup, amqp):
    """A crash after the new copy was confirmed and the row updated, but before the old copy
    was acked, brings the old copy back: the next run must drop it, not move it twice."""
    versions, old, new, rows = setup
    queue = cascade.level_name(old.prefix, 9)  # the 900 s message
    channel = amqp.conn.channel()
    before_move = channel.basic_get(queue, no_ack=True)
    channel.close()
    _republish(amqp, before_move, queue)  # put it back in place
    first = delays_move(source=broker(), target=broker(), source_version=old, target_version=new, target_row=versions["v2"])
    assert (first.moved, first.dropped) == (len(rows), 0)
    _republish(amqp, before_move, queue)  # the unacked old copy comes back
    second = delays_move(source=broker(), target=broker(), source_version=old, target_version=new, target_row=versions["v2"])
    assert (second.found, second.moved, second.dropped) == (1, 0, 1)
    assert sum(topology_count_by_level(session=amqp, version=new).values()) == len(rows)
    assert sum(topology_count_by_level(session=amqp, version=old).values()) == 0


def test_delivered_or_cancelled_rows_are_not_moved(setup, amqp):
    versions, old, new, rows = setup
    ScheduledMessage.objects.filter(id=rows[0].id).update(status=ScheduledMessage.Status.CANCELLED)
    ScheduledMessage.objects.filter(id=rows[1].id).update(status=ScheduledMessage.Status.DELIVERED)
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=new, target_row=versions["v2"])
    assert (summary.moved, summary.dropped) == (len(rows) - 2, 2)


def test_dry_run_counts_and_moves_nothing(setup, amqp):
    versions, old, new, rows = setup
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=new,
                          target_row=versions["v2"], dry_run=True)
    assert (summary.found, summary.moved, summary.poisoned) == (len(rows), len(rows), 0)
    assert sum(topology_count_by_level(session=amqp, version=old).values()) == len(rows)  # all given back
    assert sum(topology_count_by_level(session=amqp, version=new).values()) == 0
    assert not ScheduledMessage.objects.filter(topology=versions["v2"]).exists()


@pytest.fixture
def green(unique_prefix):
    """Another broker: a vhost of this test's own on the same node, removed afterwards."""
    vhost = f"{broker().vhost}-green-{unique_prefix.strip('.')}"
    with vhost_own(management=broker().management, vhost=vhost):
        yield broker(f"{broker().url.rsplit('/', 1)[0]}/{vhost}")


def test_moving_to_another_broker_takes_each_message_once(setup, amqp, green):
    versions, old, new, rows = setup
    with green.session() as session:
        session.declare(cascade.cascade_plan(old))
        summary = delays_move(source=broker(), target=green, source_version=old, target_version=old, batch=2)
        assert (summary.found, summary.moved, summary.dropped, summary.left_in_source) == (6, 6, 0, 0)
        assert sum(topology_count_by_level(session=amqp, version=old).values()) == 0
        assert sum(topology_count_by_level(session=session, version=old).values()) == len(rows)


@pytest.mark.parametrize("version", [cascade.V1, cascade.V2], ids=["classic", "quorum"])
def test_transfer_of_many_messages_acks_every_old_copy(version, declared, amqp, green):
    import time as _time

    from kombu import Producer

    source = declared(version).version
    now_ms = int(_time.time() * 1000)
    producer = Producer(amqp.conn.channel())
    for i in range(300):
        delay = 100 + i * 7
        producer.publish(b"m%d" % i, exchange=cascade.first_exchange(source, delay),
                         routing_key=cascade.routing_key(delay, "somewhere", source.levels),
                         headers={wire.H_DUE_AT_MS: now_ms + delay * 1000, wire.H_MESSAGE_ID: f"m{i}"})
    with green.session() as session:
        session.declare(cascade.cascade_plan(source))
        summary = delays_move(source=broker(), target=green, source_version=source, target_version=source,
                              batch=50)
        assert (summary.found, summary.moved, summary.dropped, summary.left_in_source) == (300, 300, 0, 0)
        assert sum(topology_count_by_level(session=session, version=source).values()) == 300
        assert sum(topology_count_by_level(session=amqp, version=source).values()) == 0


def test_every_shard_of_the_source_is_drained_into_the_targets_shard_of_each_id(versions, amqp, unique_prefix,
                                                                              endpoint_name, settings):
    """A 2-shard v2 (and a third shard left behind by a lowered count) into a 3-shard v3: every
    message leaves every source shard, and each lands in the target shard its id picks."""
    settings.DELAY_SHARDS = "v2=2,v3=3"
    old = cascade.V2.with_(prefix=unique_prefix + "v2.", shards=2)
    new = cascade.V3.with_(prefix=unique_prefix + "v3.", shards=3)
    left = cascade.shard_plan(old.with_(shards=3), 2)
    for version in (old, new):
        for shard, plan in enumerate(cascade.shard_plans(version)):
            amqp.declare(plan, first_node=shard)
    amqp.declare(left)
    try:
        for name, version in (("v2", old), ("v3", new)):
            versions[name].prefix, versions[name].provisioned_at = version.prefix, timezone.now()
            versions[name].save()
            bind_endpoint(amqp, version, endpoint_name)
        assert versions["v2"].cascade == old and versions["v3"].cascade == new
        endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v2"])
        now = timezone.now()
        # ids chosen so that rows cover both source shards and all three target shards (random
        # ids left a shard empty in ~2% of runs: a fresh-clone run failed on it)
        rows = [ScheduledMessage.objects.create(id=uuid.UUID(int=(u := uuid.uuid4().int) - u % 6 + i % 6),
                                                endpoint=endpoint, topology=versions["v2"], payload={"d": d},
                                                due_at=now + timedelta(seconds=d), requested_delay_ms=d * 1000)
                for i, d in enumerate(DELAYS * 2)]
        assert relay_publish(ids=[str(r.id) for r in rows]).published == len(rows)
        by_shard = level_depths_per_shard(amqp, old, 3)
        assert by_shard[0] + by_shard[1] == len(rows) and by_shard[0] and by_shard[1] and not by_shard[2]
        straggler = cascade.route(old.with_(shards=3), 1000, endpoint_name, 2)  # in the shard left behind
        publish(amqp, straggler.exchange, straggler.routing_key, b"left",
                {wire.H_DUE_AT_MS: int(now.timestamp() * 1000) + 1_000_000, wire.H_MESSAGE_ID: "left-1"})

        assert sum(topology_count_by_level(session=amqp, version=old).values()) == len(rows) + 1  # every shard, the one left behind too
        summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=new,
                              target_row=versions["v3"], batch=5)
        assert (summary.found, summary.moved, summary.failed, summary.left_in_source) == (len(rows) + 1,) * 2 + (0, 0)
        assert level_depths_per_shard(amqp, old, 3) == {0: 0, 1: 0, 2: 0}
        assert sum(level_depths_per_shard(amqp, new, 3).values()) == len(rows) + 1
        for row in rows:
            row.refresh_from_db()
            assert row.topology == versions["v3"]
            assert cascade.shard_of_name(new.prefix, row.first_exchange) == cascade.shard_of(row.id, 3)
        assert {cascade.shard_of(r.id, 3) for r in rows} == {0, 1, 2}
    finally:
        amqp.delete_queue(endpoint_name)
        amqp.delete_queue(cascade.poison_queue(old).name)
        for plan in (cascade.cascade_plan(new), left, cascade.cascade_plan(old)):
            amqp.teardown(plan)


def level_depths_per_shard(session, version, shards: int) -> dict[int, int]:
    return {shard: sum(session.queue_depth(cascade.level_name(version.prefix, level, shard)) or 0
                       for level in range(version.levels)) for shard in range(shards)}


# --- envelopes (DELAY_ENVELOPES): moved whole where the target carries them, split where not ----


@pytest.fixture
def envelope_setup(versions, declared, unique_prefix, endpoint_name, amqp, settings):
    """An endpoint on a fresh v3 cascade with one envelope of 3 messages (due in one second, an
    hour out) and one message alone in flight; a second v3 and a v2 cascade to move them to."""
    settings.DELAY_ENVELOPES = True
    old = declared(cascade.V3, prefix=unique_prefix + "v3.")
    targets = {"v3": declared(cascade.V3, prefix=unique_prefix + "v3b."), "v2": declared(cascade.V2, prefix=unique_prefix + "v2.")}
    for name, plan in (("v3", old), ("v2", targets["v2"])):
        versions[name].prefix = plan.version.prefix
        versions[name].provisioned_at = timezone.now()
        versions[name].save()
    for plan in (old, *targets.values()):
        bind_endpoint(amqp, plan.version, endpoint_name)
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    due = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    rows = [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], payload={"n": n},
                                            due_at=due + timedelta(milliseconds=300 * n), requested_delay_ms=3_600_000)
            for n in (0, 1, 2)]
    rows.append(ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], payload={}, requested_delay_ms=0,
                                                due_at=due + timedelta(seconds=30)))
    assert relay_publish(ids=[str(r.id) for r in rows]).published == 4
    assert sum(topology_count_by_level(session=amqp, version=old.version).values()) == 2  # an envelope and one alone
    yield versions, old.version, {name: plan.version for name, plan in targets.items()}, rows
    amqp.delete_queue(endpoint_name)
    amqp.delete_queue(cascade.poison_queue(old.version).name)


def move_envelope_setup(envelope_setup, amqp, target: str) -> list:
    """Move the setup's cascade into the target version's; every message now in the target's levels."""
    versions, old, targets, rows = envelope_setup
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=targets[target],
                          target_row=versions[target])
    assert (summary.found, summary.moved, summary.rows_updated, summary.left_in_source) == (2, 2, 4, 0)
    version = targets[target]
    return [m for level, depth in topology_count_by_level(session=amqp, version=version).items() if depth
            for m in iter(lambda level=level: get(amqp, cascade.level_name(version.prefix, level)), None)]


def test_an_envelope_moves_whole_into_a_version_with_envelopes_and_its_rows_follow(envelope_setup, amqp):
    versions, old, targets, rows = envelope_setup
    moved = move_envelope_setup(envelope_setup, amqp, "v3")
    (envelope,) = [m for m in moved if m.headers["task"] == wire.ENVELOPE_TASK]
    assert wire.envelope_ids(envelope.headers, envelope.body) == [str(r.id) for r in rows[:3]]
    assert envelope.headers[wire.H_DUE_AT_MS] == rows[0].due_at_ms  # its remaining delay kept
    for row in rows[:3]:
        row.refresh_from_db()
        assert row.first_exchange.startswith(targets["v3"].prefix) and row.status == ScheduledMessage.Status.PUBLISHED


def test_an_envelope_moved_to_v2_is_split_one_message_each_at_its_own_time(envelope_setup, amqp):
    versions, old, targets, rows = envelope_setup
    moved = move_envelope_setup(envelope_setup, amqp, "v2")
    assert [m.headers["task"] for m in moved] == [wire.DELIVER_TASK] * 4  # v2 stays one message per broker message
    due = {m.headers[wire.H_MESSAGE_ID]: m.headers[wire.H_DUE_AT_MS] for m in moved}
    assert due == {str(r.id): r.due_at_ms for r in rows}
    for row in rows:
        row.refresh_from_db()
        assert row.topology == versions["v2"] and row.first_exchange.startswith(targets["v2"].prefix)


def test_a_stale_envelope_is_dropped_only_when_every_message_in_it_is(envelope_setup, amqp):
    versions, old, targets, rows = envelope_setup
    ScheduledMessage.objects.filter(id__in=[r.id for r in rows[:2]]).update(status=ScheduledMessage.Status.DELIVERED)
    summary = delays_move(source=broker(), target=broker(), source_version=old, target_version=targets["v3"],
                          target_row=versions["v3"])
    assert (summary.moved, summary.dropped) == (2, 0)  # one message of the envelope still waits
    ScheduledMessage.objects.filter(id=rows[2].id).update(status=ScheduledMessage.Status.CANCELLED)
    back = delays_move(source=broker(), target=broker(), source_version=targets["v3"], target_version=old,
                       target_row=versions["v3"])
    assert (back.moved, back.dropped) == (1, 1)


def test_an_event_copy_moves_whole_into_a_version_with_envelopes_and_its_rows_follow(versions, declared, unique_prefix,
                                                                                     endpoint_name, amqp, settings):
    """What transfer_delays does on v3 (another cascade of the same version): the event's one copy
    moves whole, still for the fan-out queue, with its remaining delay."""
    from scheduling.models import Event

    settings.DELAY_ENVELOPES = True
    old = declared(cascade.V3, prefix=unique_prefix + "v3.")
    new = declared(cascade.V3, prefix=unique_prefix + "v3b.")
    versions["v3"].prefix = old.version.prefix
    versions["v3"].provisioned_at = timezone.now()
    versions["v3"].save()
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    due = timezone.now() + timedelta(hours=1)
    event = Event.objects.create(team=endpoint.team, topic="t", payload={}, due_at=due, message_count=3)
    rows = [ScheduledMessage.objects.create(endpoint=endpoint, topology=versions["v3"], event=event, payload={},
                                            due_at=due, requested_delay_ms=3_600_000) for _ in range(3)]
    assert relay_publish(ids=[str(r.id) for r in rows]).published == 3
    summary = delays_move(source=broker(), target=broker(), source_version=old.version, target_version=new.version,
                          target_row=versions["v3"])
    assert (summary.found, summary.moved, summary.rows_updated, summary.left_in_source) == (1, 1, 3, 0)
    moved = [m for level, depth in topology_count_by_level(session=amqp, version=new.version).items() if depth
             for m in iter(lambda level=level: get(amqp, cascade.level_name(new.version.prefix, level)), None)]
    (copy,) = moved
    assert copy.headers["task"] == wire.FAN_OUT_TASK and copy.headers[wire.H_DESTINATION] == cascade.FANOUT_QUEUE
    assert sorted(wire.read_event_copy(copy.headers, copy.body).ids) == sorted(str(r.id) for r in rows)
    assert copy.headers[wire.H_DUE_AT_MS] == rows[0].due_at_ms
    for row in rows:
        row.refresh_from_db()
        assert row.first_exchange.startswith(new.version.prefix) and row.routing_key == cascade.FANOUT_QUEUE
