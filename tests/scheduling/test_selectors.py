"""The dashboard's reads: counts by status, due windows, lateness percentiles (PostgreSQL's
nearest-rank percentile_disc) and the hourly series."""

from datetime import timedelta
from functools import partial

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling import selectors
from scheduling.models import ScheduledMessage

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


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
    for ms in lateness:
        make_rows(1, status=Status.DELIVERED, due_at=now - timedelta(minutes=10), lateness_ms=ms,
                  delivered_at=now - timedelta(minutes=10) + timedelta(milliseconds=ms))
    make_rows(1, status=Status.DELIVERED, due_at=now - timedelta(hours=3), lateness_ms=1000,
              delivered_at=now - timedelta(hours=3))
    return now, lateness


def test_dashboard_counts_and_lateness(board_rows):
    now, _ = board_rows
    board = selectors.dashboard(now)
    assert board.by_status == {"pending": 3, "published": 2, "delivered": 11, "cancelled": 1, "failed": 1}
    assert board.overdue == 1
    assert board.due == [("next minute", 2), ("next hour", 3), ("next day", 4)]
    assert board.last_hour == selectors.Lateness(10, 21, 233, 233)  # nearest rank: the 5th and the 10th
    assert [m.last_error for m in board.recent_failures] == ["unroutable: gone"]


def test_scheduled_in_the_past_is_counted_by_when_it_was_accepted(board_rows, make_rows):
    now, _ = board_rows
    assert selectors.dashboard(now).in_past == [("last hour", 0), ("last 24 hours", 0)]
    long_ago = now - timedelta(days=5)
    make_rows(2, due_at=long_ago, created_at=now - timedelta(minutes=5))  # backdated, last hour
    make_rows(1, due_at=long_ago, created_at=now - timedelta(hours=5))  # backdated, last day
    make_rows(1, due_at=long_ago, created_at=now - timedelta(days=2))  # backdated, too long ago
    make_rows(1, due_at=now - timedelta(minutes=1), created_at=now - timedelta(minutes=1))  # a delay of 0
    make_rows(1, due_at=now - timedelta(minutes=1, milliseconds=1), created_at=now - timedelta(minutes=1))
    assert selectors.dashboard(now).in_past == [("last hour", 3), ("last 24 hours", 4)]
    in_past = ScheduledMessage.objects.filter(selectors.SCHEDULED_IN_PAST)
    assert in_past.count() == 5 and in_past.filter(due_at=now - timedelta(minutes=1)).count() == 0


def test_hourly_series_is_continuous_and_buckets_by_delivery_hour(board_rows):
    now, _ = board_rows
    hourly = selectors.lateness_by_hour(now)
    assert len(hourly) == 24 and hourly[-1][0] == now.replace(minute=0, second=0, microsecond=0)
    assert all(b[0] - a[0] == timedelta(hours=1) for a, b in zip(hourly, hourly[1:]))
    by_hour = {hour: stats for hour, stats in hourly}
    three_ago = (now - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    assert by_hour[three_ago] == selectors.Lateness(1, 1000, 1000, 1000)
    assert sum(s.count for s in by_hour.values()) == 11


def test_dashboard_page_shows_the_figures_and_charts_in_a_few_queries(admin_client, board_rows,
                                                                      django_assert_max_num_queries):
    with django_assert_max_num_queries(10):
        page = admin_client.get(reverse("admin:scheduling_dashboard")).content.decode()
    assert '<div class="dp-figure" data-figure="p99"><div class="dp-value">233 ms</div>' in page
    assert 'data-status="failed" href="/admin/scheduling/scheduledmessage/?status__exact=failed">\n' \
           '        <div class="dp-value">1</div>' in page
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="dp-chart"') == 2
    assert "unroutable: gone" in page and "<polyline" in page
    assert '<a class="dp-figure" data-window="last hour" href="/admin/scheduling/scheduledmessage/?in_past=yes">' \
           '\n        <div class="dp-value">0</div>' in page
