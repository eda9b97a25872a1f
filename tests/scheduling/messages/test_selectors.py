"""The reads behind the dashboard and the lists, against PostgreSQL: each figure equals what a
direct query over the messages gives on a small dataset, counts are never an exact COUNT over
the table (capped, then PostgreSQL's estimate), and a list read page by page through its
cursor returns every row exactly once, ties of created_at included."""

import json
import random
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from functools import partial

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduling.core.clock import minute_floor
from scheduling.core.cursors import Position
from scheduling.delivery.minutes import delivery_minute_record
from scheduling.delivery.services import delivery_receive_many
from scheduling.endpoints.selectors import endpoint_count_messages
from scheduling.messages.dashboard import Lateness, dashboard_get, lateness_list_by_hour
from scheduling.messages.selectors import SCHEDULED_IN_PAST, message_get_page, message_list_groups
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.versions.selectors import topology_count_messages_by_level

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status
CAPPED_COUNT = re.compile(r"count\(\*\) FROM \(SELECT .*? LIMIT \d+\)", re.I)


def direct_lateness(since) -> Lateness:
    """The dashboard's figures as one query over the messages (what it read before)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY lateness_ms), "
                       "percentile_disc(0.99) WITHIN GROUP (ORDER BY lateness_ms), max(lateness_ms) "
                       "FROM scheduling_scheduledmessage WHERE status = 'delivered' AND delivered_at >= %s", [since])
        return Lateness(*cursor.fetchone())


def assert_no_exact_count(queries) -> None:
    """Every COUNT a page asks is over a LIMITed subquery: none counts the table or a filter of it."""
    for query in queries:
        sql = query["sql"]
        counts = len(re.findall(r"\bcount\(", sql, re.I))
        assert counts == len(CAPPED_COUNT.findall(sql)), f"an uncapped COUNT: {sql[:300]}"


@pytest.fixture
def board_rows(make_rows):
    now = timezone.now().replace(minute=30)
    make_rows = partial(make_rows, created_at=now - timedelta(days=2))  # accepted before due: not in the past
    make_rows(2, due_at=now + timedelta(seconds=20))                                 # next minute (+hour, +day)
    make_rows(1, due_at=now + timedelta(minutes=20), status=Status.PUBLISHED)        # next hour (+day)
    make_rows(1, due_at=now + timedelta(hours=5))                                    # next day
    make_rows(1, due_at=now - timedelta(seconds=5), status=Status.PUBLISHED)         # overdue
    make_rows(1, due_at=now - timedelta(days=1), status=Status.FAILED, last_error="unroutable: gone")
    make_rows(1, due_at=now + timedelta(seconds=20), status=Status.CANCELLED)        # not counted as due
    lateness = [3, 5, 8, 13, 21, 34, 55, 89, 144, 233]  # delivered within the last hour
    delivered = []
    for ms in lateness:
        delivered += make_rows(1, status=Status.DELIVERED, due_at=now - timedelta(minutes=10), lateness_ms=ms,
                               delivered_at=now - timedelta(minutes=10) + timedelta(milliseconds=ms))
    delivered += make_rows(1, status=Status.DELIVERED, due_at=now - timedelta(hours=3), lateness_ms=1000,
                           delivered_at=now - timedelta(hours=3))
    delivery_minute_record(messages=delivered)  # what the delivery path records with each delivery
    return now, lateness


def test_dashboard_figures_equal_direct_queries(board_rows):
    now, _ = board_rows
    board = dashboard_get(now=now)
    direct = dict(ScheduledMessage.objects.order_by().values_list("status").annotate(n=Count("id")))
    assert board.by_status == {s.value: direct.get(s.value, 0) for s in Status}
    assert board.by_status == {"pending": 3, "published": 2, "delivered": 11, "cancelled": 1, "failed": 1,
                               "expired": 0, "superseded": 0, "waiting": 0, "skipped": 0}
    assert all(count.exact for count in board.by_status.values())
    assert board.overdue == 1
    assert board.due == [("next minute", 2), ("next hour", 3), ("next day", 4)]
    assert board.last_hour == direct_lateness(minute_floor(now - timedelta(hours=1)))
    assert board.last_hour == Lateness(10, 21, 233, 233)  # nearest rank: the 5th and the 10th
    assert [m.last_error for m in board.recent_failures] == ["unroutable: gone"]


def test_deliveries_through_the_delivery_path_give_the_figures_of_a_direct_query(make_rows):
    """Real deliveries (the batch service the delivery loop calls), lateness from 0 to ~2 s:
    the dashboard's count, p50, p99 and max are those of percentile_disc over the rows."""
    now = timezone.now()
    rng = random.Random(7)
    rows = make_rows(300, status=Status.PUBLISHED, created_at=now - timedelta(hours=2),
                     due_at=now - timedelta(milliseconds=rng.randint(0, 2000)))
    for row in rows:  # each its own due time
        ScheduledMessage.objects.filter(id=row.id).update(due_at=now - timedelta(milliseconds=rng.randint(0, 2000)))
    for batch in (rows[:120], rows[120:]):
        delivery_receive_many(items=[(str(r.id), 0) for r in batch])
    board = dashboard_get()
    direct = direct_lateness(minute_floor(board.now - timedelta(hours=1)))
    assert board.last_hour.count == direct.count == 300 and board.last_hour.max_ms == direct.max_ms
    for figure in ("p50_ms", "p99_ms"):  # exact below 128 ms, within a bucket (1.6 %) above
        found, exact = getattr(board.last_hour, figure), getattr(direct, figure)
        assert exact <= found <= exact * 65 / 64 + 1, figure
    assert sum(stats.count for _, stats in board.hourly) == 300


def test_counts_past_the_cap_are_estimates_and_nothing_counts_the_table(make_rows, monkeypatch):
    make_rows(7, status=Status.DELIVERED)
    make_rows(2, status=Status.FAILED)
    make_rows(5)  # pending
    make_rows(6, due_at=timezone.now() - timedelta(days=1))  # pending too, scheduled in the past
    monkeypatch.setattr("scheduling.messages.dashboard.DASHBOARD_COUNT_CAP", 4)
    with CaptureQueriesContext(connection) as captured:
        board = dashboard_get()
    assert_no_exact_count(captured.captured_queries)
    assert (board.by_status["failed"], board.by_status["failed"].exact) == (2, True)
    for status in ("delivered", "pending"):  # more than the cap: not counted, estimated (at least cap + 1)
        assert not board.by_status[status].exact and board.by_status[status] >= 5
        assert str(board.by_status[status]).startswith("≈ ")
    # the planner cannot estimate due_at < created_at (it guesses a third of the table): a floor
    assert [(label, str(n)) for label, n in board.in_past] == [("last hour", "> 4"), ("last 24 hours", "> 4")]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_scheduledmessage")  # statistics: delivered is estimated, not counted
    with CaptureQueriesContext(connection) as captured:
        board = dashboard_get()
    assert board.by_status["delivered"] == 7 and not board.by_status["delivered"].exact
    assert "'delivered'" not in " ".join(q["sql"] for q in captured.captured_queries if "count(*)" in q["sql"])


def test_scheduled_in_the_past_is_counted_by_when_it_was_accepted(board_rows, make_rows):
    now, _ = board_rows
    assert dashboard_get(now=now).in_past == [("last hour", 0), ("last 24 hours", 0)]
    long_ago = now - timedelta(days=5)
    make_rows(2, due_at=long_ago, created_at=now - timedelta(minutes=5))  # backdated, last hour
    make_rows(1, due_at=long_ago, created_at=now - timedelta(hours=5))  # backdated, last day
    make_rows(1, due_at=long_ago, created_at=now - timedelta(days=2))  # backdated, too long ago
    make_rows(1, due_at=now - timedelta(minutes=1), created_at=now - timedelta(minutes=1))  # a delay of 0
    make_rows(1, due_at=now - timedelta(minutes=1, milliseconds=1), created_at=now - timedelta(minutes=1))
    assert dashboard_get(now=now).in_past == [("last hour", 3), ("last 24 hours", 4)]
    in_past = ScheduledMessage.objects.filter(SCHEDULED_IN_PAST)
    assert in_past.count() == 5 and in_past.filter(due_at=now - timedelta(minutes=1)).count() == 0


def test_hourly_series_is_continuous_and_buckets_by_delivery_hour(board_rows):
    now, _ = board_rows
    hourly = lateness_list_by_hour(now=now)
    assert len(hourly) == 24 and hourly[-1][0] == now.replace(minute=0, second=0, microsecond=0)
    assert all(b[0] - a[0] == timedelta(hours=1) for a, b in zip(hourly, hourly[1:]))
    by_hour = {hour: stats for hour, stats in hourly}
    three_ago = (now - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    assert by_hour[three_ago] == Lateness(1, 1000, 1000, 1000)
    assert sum(s.count for s in by_hour.values()) == 11


def test_dashboard_page_shows_the_figures_and_charts_in_a_few_queries(admin_client, board_rows,
                                                                      django_assert_max_num_queries):
    with django_assert_max_num_queries(10) as captured:
        page = admin_client.get(reverse("admin:scheduling_dashboard")).content.decode()
    assert_no_exact_count(captured.captured_queries)
    assert '<div class="dp-figure" data-figure="p99"><div class="dp-value">233 ms</div>' in page
    assert 'data-status="failed" href="/admin/scheduling/scheduledmessage/?status__exact=failed">\n' \
           '        <div class="dp-value">1</div>' in page
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="dp-chart"') == 2
    assert "unroutable: gone" in page and "<polyline" in page
    assert '<a class="dp-figure" data-window="last hour" href="/admin/scheduling/scheduledmessage/?in_past=yes">' \
           '\n        <div class="dp-value">0</div>' in page


# --- lists by cursor ------------------------------------------------------------------------------


@pytest.fixture
def history(make_rows, versions, endpoint_row):
    """135 messages on two endpoints and two versions, in every status; 60 of them share one
    created_at (a bulk request), 40 another."""
    other = Endpoint.objects.create(name=endpoint_row.name + "-b", queue=endpoint_row.name + "-b", topology=versions["v3"])
    now = timezone.now()
    rng = random.Random(3)
    bulk_a, bulk_b = now - timedelta(minutes=3), now - timedelta(minutes=7)
    for i in range(135):
        created = bulk_a if i < 60 else bulk_b if i < 100 else now - timedelta(seconds=rng.randint(0, 900))
        make_rows(1, endpoint=rng.choice([endpoint_row, other]), status=rng.choice(list(Status)),
                  created_at=created, due_at=created + timedelta(seconds=rng.randint(-60, 600)))
    ScheduledMessage.objects.filter(endpoint=other, status=Status.DELIVERED).update(topology=versions["v2"])
    return endpoint_row, other, versions


def read_all(queryset, groups, order_by="created_at", descending=True, limit=50, backwards_from=None):
    """Follow the cursor to the end: the ids in the order the pages gave them."""
    ids, after = [], None
    while True:
        page = message_get_page(queryset=queryset, groups=groups, order_by=order_by, descending=descending,
                                       after=after, limit=limit)
        ids += [r.id for r in page.rows]
        if not page.more:
            return ids
        after = Position(getattr(page.rows[-1], order_by), page.rows[-1].id)


@pytest.mark.parametrize("filters", [{}, {"status": "delivered"}, {"endpoint": "a"}, {"endpoint": "a", "status": "pending"},
                                     {"topology": "v2"}, {"topology": "v3", "status": "delivered"}, {"endpoint": "b",
                                                                                                      "topology": "v2"}])
def test_every_row_once_in_the_order_of_a_sort_whatever_the_ranges_merged(history, filters):
    first, other, versions = history
    lookups = {}
    if "endpoint" in filters:
        lookups["endpoint_id"] = (first if filters["endpoint"] == "a" else other).pk
    if "status" in filters:
        lookups["status"] = filters["status"]
    if "topology" in filters:
        lookups["topology_id"] = versions[filters["topology"]].pk
    queryset = ScheduledMessage.objects.filter(**lookups)
    groups = message_list_groups(fixed=set(filters))
    expected = list(queryset.order_by("-created_at", "-id").values_list("id", flat=True))
    for limit in (7, 50):
        assert read_all(queryset, groups, limit=limit) == expected


@pytest.mark.parametrize("descending", [True, False])
def test_by_due_time_and_backwards_from_any_page(history, descending):
    queryset = ScheduledMessage.objects.all()
    order = ("-due_at", "-id") if descending else ("due_at", "id")
    expected = list(queryset.order_by(*order).values_list("id", flat=True))
    assert read_all(queryset, [], order_by="due_at", descending=descending, limit=11) == expected
    groups = message_list_groups(fixed=set())
    newest = list(queryset.order_by("-created_at", "-id").values_list("id", flat=True))
    third = message_get_page(queryset=queryset, groups=groups, limit=20,
                                    after=Position(ScheduledMessage.objects.get(id=newest[39]).created_at, newest[39]))
    back = message_get_page(queryset=queryset, groups=groups, limit=20,
                                   before=Position(third.rows[0].created_at, third.rows[0].id))
    assert [r.id for r in third.rows] == newest[40:60] and [r.id for r in back.rows] == newest[20:40] and back.more


def test_a_merged_page_costs_the_same_queries_whatever_the_groups(history, versions, django_assert_num_queries):
    first, _, _ = history
    for n in range(20):  # more endpoints, more groups: not more queries
        Endpoint.objects.create(name=f"{first.name}-{n}", queue=f"{first.name}-{n}", topology=versions["v1"])
    groups = message_list_groups(fixed={"topology"})
    assert len(groups) == 22 * 9  # every endpoint x status
    queryset = ScheduledMessage.objects.filter(topology__name="v2")
    # the finished ranges of each partial index (history, ended), the in-flight ones, the waiting ones
    # (an ordering key's turn: in no partial index of the others), then their rows
    with django_assert_num_queries(5) as captured:
        page = message_get_page(queryset=queryset, groups=groups)
    assert "IN ('cancelled', 'delivered', 'failed')" in captured.captured_queries[0]["sql"]  # its partial index
    assert "IN ('expired', 'skipped', 'superseded')" in captured.captured_queries[1]["sql"]  # message_endpoint_ended's
    assert [r.id for r in page.rows] == list(queryset.order_by("-created_at", "-id").values_list("id", flat=True)[:50])


def test_endpoint_counts_are_exact_up_to_the_cap_then_estimates(history, monkeypatch, django_assert_max_num_queries):
    first, other, _ = history
    direct = {(e, s): n for e, s, n in ScheduledMessage.objects.values_list("endpoint_id", "status")
              .annotate(n=Count("id"))}
    with django_assert_max_num_queries(2) as captured:
        counts = endpoint_count_messages(endpoint_ids=[first.pk, other.pk])
    assert_no_exact_count(captured.captured_queries)
    assert {(e, s): n for e, by in counts.items() for s, n in by.items() if n} == direct
    assert all(n.exact for by in counts.values() for n in by.values())
    monkeypatch.setattr("scheduling.endpoints.selectors.ENDPOINT_COUNT_CAP", 3)
    capped = endpoint_count_messages(endpoint_ids=[first.pk])[first.pk]
    for status, n in capped.items():
        if direct.get((first.pk, status), 0) > 3:
            assert not n.exact and n >= 4
        else:
            assert n.exact and n == direct.get((first.pk, status), 0)


def rows_visited(sql: str) -> tuple[int, list[str]]:
    """Rows a statement's plan removed by a filter (read, then thrown away), and its indexes."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    removed, indexes, stack = 0, [], [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        removed += int(node.get("Rows Removed by Filter", 0)) * int(node.get("Actual Loops", 1))
        indexes += [node["Index Name"]] if "Index Name" in node else []
        stack += node.get("Plans", [])
    return removed, indexes


@pytest.mark.parametrize("filters", [{"endpoint"}, {"topology"}])
def test_a_list_does_not_walk_other_endpoints_messages_in_flight(make_rows, versions, endpoint_row, filters):
    """The in-flight part of an endpoint's or a version's list reads its own ranges only. On
    (endpoint, status) PostgreSQL walked (status, created_at) through every message in flight and
    filtered: 163 ms for an endpoint with none while another had 200,000 (make bench-history's
    dominant endpoint: 1.6 s at 50 M rows)."""
    busy = Endpoint.objects.create(name=endpoint_row.name + "-busy", queue=endpoint_row.name + "-busy", topology=versions["v3"])
    make_rows(3000, endpoint=busy, status=Status.PUBLISHED)
    make_rows(3000, endpoint=busy, status=Status.DELIVERED)
    make_rows(5, status=Status.DELIVERED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_scheduledmessage")
    lookups = ({"endpoint_id": endpoint_row.pk} if filters == {"endpoint"}
               else {"topology_id": versions["v1"].pk})
    queryset = ScheduledMessage.objects.filter(**lookups)
    with CaptureQueriesContext(connection) as captured:
        message_get_page(queryset=queryset, groups=message_list_groups(fixed=filters))
    in_flight = next(q["sql"] for q in captured.captured_queries if "IN ('pending', 'published')" in q["sql"])
    removed, indexes = rows_visited(in_flight)
    assert removed == 0 and "message_endpoint_in_flight" in indexes, (removed, indexes)


# --- messages per level (the admin's in-flight page, with envelopes) ---------------------------


def test_messages_by_level_follow_each_broker_message_down_its_set_bits(versions, endpoint_name, settings):
    settings.DELAY_ARRIVAL_MARGIN_MS = 20
    v3 = versions["v3"]
    endpoint = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=v3)
    t = datetime(2026, 11, 25, 12, 0, 0, 500_000, tzinfo=dt_timezone.utc)  # published at x.5 s

    def published(due_after_s, **fields):
        fields = {"status": ScheduledMessage.Status.PUBLISHED, "published_at": t, **fields}
        return ScheduledMessage(endpoint=endpoint, topology=v3, payload={}, requested_delay_ms=0,
                                due_at=t + timedelta(seconds=due_after_s), **fields)

    ScheduledMessage.objects.bulk_create([
        published(1000),  # 999 units: levels 9, 8, 7, 6, 5, 2, 1, 0; 10 s on, still in level 9 (512 s)
        published(300),  # 299 units: levels 8, 5, 3, 1, 0; 260 s on, in level 5 (256 <= 260 < 288)
        # one envelope (due in the same second, x+6): it has the first one's 5 units (levels 2 and 0)
        # though the second alone would have 6 (levels 2 and 1); 4 s on, both are in level 0
        published(5.6), published(6.4),
        published(3),  # 2 units: gone from the cascade after 2 s
        published(100, attempts=1),  # a retry: not on its first path
        published(100, status=ScheduledMessage.Status.DELIVERED),
        published(100, status=ScheduledMessage.Status.PENDING, published_at=None),
    ])
    ScheduledMessage.objects.create(endpoint=Endpoint.objects.create(name=f"{endpoint_name}-2", queue=f"{endpoint_name}-2", topology=versions["v2"]),
                                    topology=versions["v2"], payload={}, requested_delay_ms=0, due_at=t,
                                    status=ScheduledMessage.Status.PUBLISHED, published_at=t)
    count = partial(topology_count_messages_by_level, version=v3)
    assert count(now=t + timedelta(seconds=4.2)) == {9: 1, 8: 1, 0: 2, None: 1}
    assert count(now=t + timedelta(seconds=10)) == {9: 1, 8: 1, None: 3}
    assert count(now=t + timedelta(seconds=260)) == {9: 1, 5: 1, None: 3}


def test_messages_by_level_give_up_past_their_time_bound(versions, monkeypatch):
    monkeypatch.setattr("scheduling.versions.selectors.LEVEL_COUNT_TIMEOUT_MS", 50)
    monkeypatch.setattr("scheduling.versions.selectors._MESSAGES_BY_LEVEL_SQL",
                        "SELECT 0, count(*) FROM pg_sleep(1) WHERE %(version)s > 0")
    assert topology_count_messages_by_level(version=versions["v3"], now=timezone.now()) is None
    assert ScheduledMessage.objects.count() == 0  # the connection is usable after the cancelled statement
