"""Topology versions in the admin: provision and verify against the real broker, and the
detail page's in-flight counts, unroutable depth and endpoint bindings."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from harness.endpoints import bind_endpoint
from harness.waiting import wait_until
from scheduling.config.conf import broker
from scheduling.models import ScheduledMessage, TopologyVersion
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]
LIST = reverse("admin:scheduling_topologyversion_changelist")


def shown(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def fresh_v1(versions, amqp, unique_prefix):
    """The v1 row pointed at a prefix with nothing on the broker; its cascade is removed after."""
    version = versions["v1"]
    version.prefix, version.levels = unique_prefix, 4
    version.save()
    yield version
    amqp.teardown(cascade.cascade_plan(version.cascade))


def test_verify_lists_each_missing_piece_then_provision_makes_it_healthy(admin_client, fresh_v1):
    response = admin_client.post(LIST, {"action": "verify", "_selected_action": [fresh_v1.pk]}, follow=True)
    (report,) = [m for m in shown(response) if "problem(s)" in m]
    assert f"<li>missing exchange {fresh_v1.prefix}delay-level-03</li>" in report
    assert f"<li>missing queue {fresh_v1.prefix}delay-unroutable</li>" in report
    assert f"<li>missing queue {fresh_v1.prefix}delay-unroutable</li>" in response.content.decode()  # not escaped
    fresh_v1.refresh_from_db()
    assert fresh_v1.verified_at and len(fresh_v1.verify_problems) == report.count("<li>")
    detail = admin_client.get(reverse("admin:scheduling_topologyversion_change", args=[fresh_v1.pk]))
    assert f"missing queue {fresh_v1.prefix}delay-level-00" in detail.content.decode()

    response = admin_client.post(reverse("admin:scheduling_topologyversion_action", args=[fresh_v1.pk, "provision"]),
                                 follow=True)
    assert any(m.startswith("v1: declared 7 exchanges, 5 queues and 14 bindings") for m in shown(response)), shown(response)
    response = admin_client.post(LIST, {"action": "verify", "_selected_action": [fresh_v1.pk]}, follow=True)
    assert "v1: the broker matches the plan" in shown(response)
    fresh_v1.refresh_from_db()
    assert fresh_v1.provisioned_at and fresh_v1.verify_problems == []


def park(fresh_v1, levels=12):
    """Give the version enough levels that test messages stay put (TTLs of minutes) while the
    broker's statistics, refreshed every few seconds, catch up."""
    fresh_v1.levels = levels
    fresh_v1.save()
    return fresh_v1.cascade


def test_detail_shows_depth_per_level_with_ttl_unroutable_and_bindings(admin_client, fresh_v1, amqp, endpoint_row):
    from kombu import Producer

    version = park(fresh_v1)
    amqp.declare(cascade.cascade_plan(version))
    bind_endpoint(amqp, version, endpoint_row.name)
    producer = Producer(amqp.conn.channel())
    for delay in (1000, 1000, 300):  # start at level 9 (TTL 512 s) and level 8 (256 s)
        producer.publish(b"x", exchange=cascade.first_exchange(version, delay),
                         routing_key=cascade.routing_key(delay, endpoint_row.name, 12))
    producer.publish(b"x", exchange=cascade.delivery_exchange(fresh_v1.prefix), routing_key="0." * 12 + "nobody")
    management, vhost = broker().management, broker().vhost
    expected = {cascade.level_name(fresh_v1.prefix, 9): 2, cascade.level_name(fresh_v1.prefix, 8): 1,
                cascade.unroutable_name(fresh_v1.prefix): 1}
    wait_until(lambda: all(management.queue_depths(vhost).get(q, {}).get("messages") == n for q, n in expected.items()),
               60, 0.5, "the broker's statistics to count the messages")

    now = timezone.now()  # and the rows of three messages in one envelope, 1,000 s in the cascade: level 9
    ScheduledMessage.objects.bulk_create([ScheduledMessage(
        endpoint=endpoint_row, topology=fresh_v1, payload={}, requested_delay_ms=0, status="published",
        published_at=now, due_at=now + timedelta(seconds=1000, milliseconds=n)) for n in range(3)])
    page = admin_client.get(reverse("admin:scheduling_topologyversion_change", args=[fresh_v1.pk])).content.decode()
    assert '<tr data-level="11"><td>11</td>' in page and '<tr data-level="0"><td>00</td>' in page
    rows = {level: page.split(f'data-level="{level}"')[1].split("</tr>")[0] for level in range(12)}
    assert "512 seconds" in rows[9] and '<td class="dp-num dp-messages">2</td>' in rows[9]
    assert '<td class="dp-num dp-level-messages">3</td>' in rows[9]
    assert all('<td class="dp-num dp-level-messages">0</td>' in rows[level] for level in range(12) if level != 9)
    assert "256 seconds" in rows[8] and '<td class="dp-num dp-messages">1</td>' in rows[8]
    assert '<td class="dp-num dp-messages">0</td>' in rows[0]
    assert '<strong id="dp-in-cascade">3</strong>' in page and '<strong id="dp-unroutable">1</strong>' in page
    assert f"<code>#.{endpoint_row.name}</code>" in page and "<td>yes</td>" in page


def test_detail_says_when_the_management_api_is_away(admin_client, versions, settings):
    settings.RABBITMQ_MANAGEMENT_URL = "http://guest:guest@127.0.0.1:1"
    response = admin_client.get(reverse("admin:scheduling_topologyversion_change", args=[versions["v2"].pk]))
    assert response.status_code == 200
    assert "Queue depths unavailable: cannot reach the RabbitMQ management API" in response.content.decode()


def test_versions_cannot_be_added_edited_or_deleted(admin_client, versions):
    assert admin_client.get(reverse("admin:scheduling_topologyversion_add")).status_code == 403
    url = reverse("admin:scheduling_topologyversion_change", args=[versions["v2"].pk])
    admin_client.post(url, {"prefix": "changed."})
    assert TopologyVersion.objects.get(pk=versions["v2"].pk).prefix == "dp.v2."
    assert admin_client.get(reverse("admin:scheduling_topologyversion_delete", args=[versions["v2"].pk])).status_code == 403


def test_list_shows_in_flight_per_version_and_preview_moves_nothing(admin_client, fresh_v1, versions, amqp):
    import time

    from kombu import Producer

    from scheduling.messages import wire
    from scheduling.versions.broker import topology_count_by_level

    version = park(fresh_v1)
    amqp.declare(cascade.cascade_plan(version))
    producer = Producer(amqp.conn.channel())
    due_ms = int(time.time() * 1000) + 1_000_000
    for headers in ({wire.H_DUE_AT_MS: due_ms}, {wire.H_DUE_AT_MS: due_ms + 1000}, {}):  # the last one: no due time
        producer.publish(b"x", exchange=cascade.first_exchange(version, 1000),
                         routing_key=cascade.routing_key(1000, "somewhere", 12), headers=headers)
    management, vhost = broker().management, broker().vhost
    wait_until(lambda: management.queue_depths(vhost).get(cascade.level_name(fresh_v1.prefix, 9), {}).get("messages")
               == 3, 60, 0.5, "the broker's statistics")
    page = admin_client.get(LIST).content.decode()
    row = page.split(f">{fresh_v1.prefix}<")[1].split("</tr>")[0]
    assert '<td class="field-in_flight">3</td>' in row

    response = admin_client.post(LIST, {"action": "preview_migration", "_selected_action": [fresh_v1.pk]}, follow=True)
    (report,) = [m for m in shown(response) if "Nothing was moved" in m]
    assert report.startswith("v1 -> v3: 3 delayed message(s) (L09: 3); 2 would move (0 straight to delivery), "
                             "1 to the poison queue"), report
    assert sum(topology_count_by_level(session=amqp, version=version).values()) == 3  # all given back


def test_preview_needs_the_provision_permission(staff_client, versions):
    client = staff_client("viewer")
    response = client.post(LIST, {"action": "preview_migration", "_selected_action": [versions["v1"].pk]})
    assert response.status_code == 403


def test_a_sharded_version_shows_its_shards_and_each_levels_count_per_shard(admin_client, fresh_v1, amqp, settings):
    from django.utils import timezone

    from tests.topology.helpers import publish

    settings.DELAY_SHARDS = "v1=2"
    version = park(fresh_v1)
    assert version.shards == 2
    for shard, plan in enumerate(cascade.shard_plans(version)):
        amqp.declare(plan, first_node=shard)
    try:
        for shard, copies in ((0, 1), (1, 2)):
            r = cascade.route(version, 1000, "somewhere", shard)  # level 9 of the shard
            for _ in range(copies):
                publish(amqp, r.exchange, r.routing_key)
        management, vhost = broker().management, broker().vhost
        wait_until(lambda: management.queue_depths(vhost).get(cascade.level_name(version.prefix, 9, 1), {})
                   .get("messages") == 2 and management.queue_depths(vhost)
                   .get(cascade.level_name(version.prefix, 9), {}).get("messages") == 1,
                   60, 0.5, "the broker's statistics")
        page = admin_client.get(reverse("admin:scheduling_topologyversion_change", args=[fresh_v1.pk])).content.decode()
        assert '<strong>2 shards</strong>' in page and "<th>per shard</th>" in page
        row = page.split('data-level="9"')[1].split("</tr>")[0]
        assert f'title="{version.prefix}delay-level-09: 1, {version.prefix}delay-level-09-s1: 2">3</td>' in row
        assert '<td class="dp-shards">s0 1 · s1 2</td>' in row
        assert '<strong id="dp-in-cascade">3</strong>' in page
        listing = admin_client.get(LIST).content.decode().split(f">{fresh_v1.prefix}<")[1].split("</tr>")[0]
        assert '<td class="field-shard_count">2</td>' in listing and '<td class="field-in_flight">3</td>' in listing

        response = admin_client.post(LIST, {"action": "verify", "_selected_action": [fresh_v1.pk]}, follow=True)
        assert "v1: the broker matches the plan" in shown(response)  # both shards (12 levels each, not 28)
        assert "v1: quorum leaders: none (no quorum queues in this cascade)" in shown(response)  # classic

        fresh_v1.provisioned_at, fresh_v1.shards = timezone.now(), 1  # provisioned before the count was raised
        fresh_v1.save()
        listing = admin_client.get(LIST).content.decode().split(f">{fresh_v1.prefix}<")[1].split("</tr>")[0]
        assert '<td class="field-shard_count">2 (provisioned with 1: provision again)</td>' in listing
    finally:
        amqp.teardown(cascade.shard_plan(version, 1))
