"""The rate limits (off in the other tests): per user (DELAY_API_RATE), per team (DELAY_TEAM_API_RATE
or the team's own) and per key (DELAY_KEY_API_RATE or the team's key_api_rate). A bulk request
counts its messages, one that does not fit is refused whole (429 with Retry-After) and stores
nothing, users do not share a budget, a team's keys and members do, and the window slides."""

import pytest

from scheduling.api.throttles import ItemRateThrottle
from scheduling.models import ScheduledMessage

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


@pytest.fixture
def clock(monkeypatch):
    """The throttle's time, moved by hand."""
    now = {"t": 1_000_000.0}
    monkeypatch.setattr(ItemRateThrottle, "timer", lambda self: now["t"])
    return now


@pytest.fixture
def rate(settings, endpoint, clock):
    settings.DELAY_API_RATE = "5/minute"


def bulk(api, endpoint, n):
    return api.post("/api/messages/bulk/", {"messages": [{"endpoint": endpoint, "payload": i, "delay_seconds": 60}
                                                         for i in range(n)]}, format="json")


def test_a_bulk_counts_its_messages_and_one_that_does_not_fit_is_refused_whole(api, endpoint, rate):
    assert bulk(api, endpoint, 3).status_code == 201
    refused = bulk(api, endpoint, 3)
    assert refused.status_code == 429, refused.content
    assert 1 <= int(refused["Retry-After"]) <= 61 and "throttled" in refused.json()["detail"]
    assert ScheduledMessage.objects.count() == 3
    assert bulk(api, endpoint, 2).status_code == 201  # what is left of the window still fits
    assert api.get("/api/messages/").status_code == 429  # every request counts, reads too
    assert ScheduledMessage.objects.count() == 5


def test_the_window_slides_and_retry_after_says_when(api, endpoint, rate, clock):
    assert bulk(api, endpoint, 4).status_code == 201
    clock["t"] += 30
    assert bulk(api, endpoint, 1).status_code == 201
    refused = bulk(api, endpoint, 2)
    assert refused.status_code == 429 and int(refused["Retry-After"]) in (30, 31)  # when the first 4 expire
    clock["t"] += 31
    assert bulk(api, endpoint, 4).status_code == 201  # the 4 expired; the 1 of 30 s ago remains
    assert bulk(api, endpoint, 1).status_code == 429
    assert ScheduledMessage.objects.count() == 9


def test_users_do_not_share_a_budget(api, api_as, endpoint, rate):
    assert bulk(api, endpoint, 5).status_code == 201
    assert bulk(api, endpoint, 1).status_code == 429
    other = api_as("member")
    assert other.post("/api/messages/", {"endpoint": endpoint, "payload": 1, "delay_seconds": 9},
                      format="json").status_code == 201


def test_a_bulk_larger_than_the_whole_rate_says_so(api, endpoint, rate):
    refused = bulk(api, endpoint, 6)
    assert refused.status_code == 429 and "more than the rate limit allows in a whole minute (5" in refused.json()["detail"]
    assert "Retry-After" not in refused  # waiting would not help
    assert not ScheduledMessage.objects.exists()
    assert bulk(api, endpoint, 5).status_code == 201  # the refused one cost nothing


def test_a_bulk_over_the_bulk_limit_is_a_400_not_a_429(api, endpoint, rate, settings):
    settings.DELAY_BULK_MAX = 10
    response = bulk(api, endpoint, 11)
    assert response.status_code == 400 and "no more than 10" in str(response.json())


def test_off_means_no_limit(api, endpoint, settings, clock):
    settings.DELAY_API_RATE = None
    for _ in range(3):
        assert bulk(api, endpoint, 1000).status_code == 201
    assert ScheduledMessage.objects.count() == 3000


def test_the_counts_live_in_the_shared_cache_table(api, endpoint, rate):
    from django.db import connection

    assert bulk(api, endpoint, 2).status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM dp_throttle_cache WHERE cache_key LIKE %s", ["%throttle:api:%"])
        assert cursor.fetchone()[0] == 1


def history(user):
    from django.core.cache import caches

    return caches["throttle"].get(f"dp:throttle:api:{user.pk}", [])


def test_a_process_takes_the_budget_in_leases_and_spends_them_without_the_table(api, admin_user, endpoint, settings,
                                                                                clock):
    settings.DELAY_API_RATE = "6000/minute"  # a lease is a slot's worth: 100 requests, for 1 s
    for _ in range(50):
        assert api.get("/api/messages/").status_code == 200
    assert [n for _, n in history(admin_user)] == [100]  # one visit of the table for 50 requests
    clock["t"] += 1.001  # the lease has expired: its 50 unspent requests stay counted, and are lost
    assert api.get("/api/messages/").status_code == 200
    assert sum(n for _, n in history(admin_user)) == 200


def test_a_lease_never_admits_more_than_the_rate(api, admin_user, endpoint, settings, clock):
    settings.DELAY_API_RATE = "120/minute"  # leases of 2
    answers = [api.get("/api/messages/").status_code for _ in range(125)]
    assert answers.count(200) == 120 and set(answers[120:]) == {429}
    assert sum(n for _, n in history(admin_user)) == 120


def test_a_group_s_rate_replaces_the_default_for_its_members(api, api_as, admin_user, endpoint, settings, clock):
    from django.contrib.auth.models import Group

    settings.DELAY_API_RATE = "1000/minute"
    settings.DELAY_API_RATE_GROUPS = {"slow": "2/minute", "batch": None}
    Group.objects.create(name="slow").user_set.add(admin_user)
    Group.objects.create(name="batch").user_set.add(admin_user)  # in two: the lowest rate holds
    assert bulk(api, endpoint, 2).status_code == 201
    assert bulk(api, endpoint, 1).status_code == 429
    other = api_as("member")  # in no group: the default
    assert bulk(other, endpoint, 3).status_code == 201


def test_a_team_shares_one_budget_across_its_keys_and_members(api, api_as, team_key, endpoint, settings, clock):
    settings.DELAY_TEAM_API_RATE = "5/minute"
    first, second, member = team_key("default"), team_key("default"), api_as("member")
    assert bulk(first, endpoint, 3).status_code == 201
    assert bulk(second, endpoint, 2).status_code == 201
    refused = bulk(member, endpoint, 1)  # the same team (the member's only one)
    assert refused.status_code == 429 and refused["Retry-After"]
    assert ScheduledMessage.objects.count() == 5
    assert team_key("growth").get("/api/endpoints/").status_code == 200  # another team: a budget of its own
    assert bulk(api, endpoint, 1).status_code == 201  # an operator acts in no one team: not charged to it


def test_a_team_s_own_rate_wins_over_the_platform_s(team_key, endpoint, settings, clock):
    from scheduling.models import Team

    settings.DELAY_TEAM_API_RATE = "1000/minute"
    Team.objects.filter(name="default").update(api_rate="2/minute")
    key = team_key("default")
    assert bulk(key, endpoint, 2).status_code == 201
    assert bulk(key, endpoint, 1).status_code == 429
    assert ScheduledMessage.objects.count() == 2


def test_each_key_has_its_own_budget(team_key, endpoint, settings, clock):
    from scheduling.models import Team

    settings.DELAY_KEY_API_RATE = "3/minute"
    first, second = team_key("default"), team_key("default")
    assert bulk(first, endpoint, 3).status_code == 201
    assert bulk(first, endpoint, 1).status_code == 429
    assert bulk(second, endpoint, 3).status_code == 201
    Team.objects.filter(name="default").update(key_api_rate="off")  # the team's own: no limit per key
    assert bulk(first, endpoint, 10).status_code == 201
    assert ScheduledMessage.objects.count() == 16


@pytest.mark.parametrize("session", [False, True])
def test_a_person_in_two_teams_is_charged_to_the_team_each_request_acts_in(api_as, team_key, endpoint, settings,
                                                                          clock, session):
    """By a person's key or session: the endpoint's team for scheduling, the message's for a detail
    route, the named team for a list; never no team (the person in two would have no limit)."""
    from scheduling.models import Membership, Team

    settings.DELAY_TEAM_API_RATE = "5/minute"
    person = api_as("member")
    Membership.objects.create(team=Team.objects.get_or_create(name="growth")[0], user=person.user, role="member")
    if session:
        from rest_framework.test import APIClient

        user, person = person.user, APIClient()
        person.force_login(user)  # a session, as the browsable API or a script logged in
    made = bulk(person, endpoint, 3)  # default's endpoint: default's budget
    assert made.status_code == 201, made.content
    message = made.json()["messages"][0]["id"]
    assert person.get(f"/api/messages/{message}/").status_code == 200  # default's message: 4
    assert person.get("/api/endpoints/?team=default").status_code == 200  # 5
    refused = team_key("default").get("/api/endpoints/")
    assert refused.status_code == 429 and refused["Retry-After"]  # the team's whole budget is spent
    assert person.get(f"/api/messages/{message}/").status_code == 429
    assert team_key("growth").get("/api/endpoints/").status_code == 200  # growth was charged nothing
    assert person.get("/api/endpoints/?team=growth").status_code == 200
