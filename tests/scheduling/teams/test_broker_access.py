"""The permission regexes of a team's RabbitMQ user (scheduling/teams/broker_access.py), matched as
RabbitMQ matches them (unanchored): what team ``shop`` must reach, and everything it must not."""

import re

import pytest

from scheduling.teams import broker_access
from scheduling.teams.broker_access import permissions, reaches, worker_settings

TEAM = "shop"
OWN_WORKER = [  # what its Celery worker declares, binds, consumes and publishes to for itself
    "shop--celery.pidbox",  # the control exchange (fanout)
    "celery@host.shop--celery.pidbox",  # its node's pidbox queue, default node name
    "worker1@web-01.example.com.shop--celery.pidbox",  # a dotted host name
    "reply.shop--celery.pidbox",  # the reply exchange
    "0b6c8f4e-5a9e-3c4d-8a7b-1f2e3d4c5b6a.reply.shop--celery.pidbox",  # a reply queue
    "shop--celeryev",  # the event exchange
    "shop--celeryev.6c1c9a8e-0d3a-4c55-9b3e-0f3e2b1a9d77",  # an event receiver's queue
]
OWN_QUEUES = ["shop--tasks", "shop--billing.eu", "shop--a--b"]  # its endpoints' queues
NEVER = [
    "", "amq.default", "amq.topic", "amq.direct",  # the default exchange publishes into any queue by name
    "dp.v3.delivery", "dp.v3.level.07", "dp.v2.level.00", "dp.level.12", "dp.v3.unroutable",  # the cascades
    "dp.relay", "celery", "celeryev", "celery.pidbox", "reply.celery.pidbox",  # the platform's own
    "celery@host.celery.pidbox", "worker@host.celery.pidbox",  # the platform worker's remote control
    "other--tasks", "shop-eu--tasks", "eu-shop--tasks", "shopx--tasks", "xshop--tasks", "sho--tasks",  # other teams
    "other--celery.pidbox", "celery@host.other--celery.pidbox", "reply.other--celery.pidbox",
    "other--celeryev", "other--celeryev.1",
    # another team's endpoint named to end like shop's control resources (endpoint names hold dots and --)
    "other--x.shop--celery.pidbox", "other--reply.shop--celery.pidbox",
    "celery@host.shop--celery.pidbox.x", "xshop--celery.pidbox", "celery@host.xshop--celery.pidbox",
    "shop--celery.pidbox\nx",
]


@pytest.mark.parametrize("name", OWN_WORKER)
def test_its_workers_own_resources_are_configured_read_and_written(name):
    assert all(reaches(regex, name) for regex in permissions(TEAM).values()), name


@pytest.mark.parametrize("name", OWN_QUEUES)
def test_its_queues_are_read_and_written_never_configured(name):
    granted = permissions(TEAM)
    assert reaches(granted["read"], name) and reaches(granted["write"], name)
    assert not reaches(granted["configure"], name)  # the platform declares them; the team cannot delete one


@pytest.mark.parametrize("name", NEVER)
def test_nothing_else_is_reached(name):
    assert not any(reaches(regex, name) for regex in permissions(TEAM).values()), name


def test_the_settings_put_every_worker_resource_under_the_team():
    settings = worker_settings(TEAM)
    assert settings == {"control_exchange": "shop--celery", "event_exchange": "shop--celeryev",
                        "event_queue_prefix": "shop--celeryev"}
    # the names kombu's Mailbox and Celery's EventReceiver derive from them
    derived = [f"{settings['control_exchange']}.pidbox", f"celery@h.{settings['control_exchange']}.pidbox",
               f"reply.{settings['control_exchange']}.pidbox", f"abc.reply.{settings['control_exchange']}.pidbox",
               settings["event_exchange"], f"{settings['event_queue_prefix']}.abc"]
    assert all(reaches(permissions(TEAM)["configure"], name) for name in derived)


@pytest.mark.parametrize("team", ["a", "a-b", "x1-2-y", "growth-eu"])
def test_every_valid_team_name_is_taken_literally(team):
    """Team names hold letters, digits and '-' (models/teams.py); each is escaped all the same, so
    one team's regex never reaches a team whose name differs by a character."""
    granted = permissions(team)
    assert re.escape(team) in granted["read"]
    assert reaches(granted["read"], f"{team}--q")
    for other in (f"{team}x", f"x{team}", f"{team}-x", f"x-{team}"):
        assert not reaches(granted["read"], f"{other}--q") and not reaches(granted["configure"], f"{other}--celeryev")


def test_a_regex_metacharacter_in_a_name_is_escaped():
    """No valid team name holds one; were one to, it would still be matched literally."""
    granted = permissions("a.b")
    assert reaches(granted["read"], "a.b--q") and not reaches(granted["read"], "axb--q")


def test_user_names_and_their_team():
    assert broker_access.user_name("shop") == "dp-team.shop"
    assert broker_access.team_of_user("dp-team.shop") == "shop"
    assert broker_access.team_of_user("guest") is None and broker_access.team_of_user("dp-team.") is None


def test_permissions_other_than_the_teams_are_problems():
    assert broker_access.permission_problems("shop", permissions("shop")) == []
    wider = {**permissions("shop"), "read": ".*"}
    (problem,) = broker_access.permission_problems("shop", wider)
    assert problem.startswith("read '.*'")
    assert len(broker_access.permission_problems("shop", permissions("other"))) == 3
