"""A schedule's runs are messages in flight of its team: a schedule whose runs at once would pass
the in-flight quota is refused when made, and a run that finds the quota full is skipped and
counted on the schedule (its row, the API's answer, the admin)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.core.errors import QuotaExceeded
from scheduling.core.lifecycle import IN_FLIGHT_VALUES
from scheduling.models import Schedule, ScheduledMessage, Team
from scheduling.schedules.services import schedule_create_runs, schedule_upsert
from scheduling.teams.services import team_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(endpoint):
    return team_update(team=Team.objects.get(pk=endpoint.team_id), max_in_flight=30)


def in_flight(endpoint) -> int:
    return ScheduledMessage.objects.filter(endpoint=endpoint, status__in=IN_FLIGHT_VALUES).count()


def test_twelve_schedules_of_ten_seconds_stay_within_a_quota_of_thirty(team, endpoint):
    """The issue's team: each schedule keeps its runs of the next minute in flight (5 or 6), so
    the quota takes five at most; the others are refused, naming the schedule and the quota."""
    made, refused = [], []
    for n in range(12):
        try:
            made.append(schedule_upsert(key=f"tick-{n}", endpoint=endpoint.name, payload={"n": n},
                                        interval_seconds=10, team=team)[0])
        except QuotaExceeded as exc:
            refused.append(str(exc))
        assert in_flight(endpoint) <= 30
    assert 3 <= len(made) <= 6 and len(refused) == 12 - len(made)
    assert "schedule 'tick-11' would keep" in refused[-1] and "of its quota of 30 (messages_in_flight" in refused[-1]
    assert set(Schedule.objects.values_list("key", flat=True)) == {s.key for s in made}  # nothing stored


def test_a_run_that_finds_the_quota_full_is_skipped_and_counted(team, endpoint, api):
    schedule, _ = schedule_upsert(key="tick", endpoint=endpoint.name, payload={"n": 1}, interval_seconds=10,
                                  team=team)
    first_runs = in_flight(endpoint)
    now = timezone.now()
    ScheduledMessage.objects.bulk_create([  # the API fills the rest of the quota
        ScheduledMessage(endpoint=endpoint, topology=endpoint.topology, payload=i, due_at=now + timedelta(hours=1),
                         requested_delay_ms=3_600_000) for i in range(30 - first_runs)])
    later = schedule.next_run_at + timedelta(seconds=25)  # the materialiser's pass, with runs to make
    result = schedule_create_runs(now=later - timedelta(seconds=60))
    schedule.refresh_from_db()
    assert result.runs == 0 and result.over_quota >= 1
    assert schedule.runs_skipped == result.over_quota and schedule.last_run_skipped_at is not None
    assert in_flight(endpoint) == 30
    answer = api.get(f"/api/schedules/{schedule.key}/").json()
    assert answer["runs_skipped"] == schedule.runs_skipped
    assert answer["last_run_skipped_at"] is not None
