"""A team's own RabbitMQ user: made or rotated through the management API (rabbit/management.py),
its permissions those of teams/broker_access.py, and checked by ``provision_delays --verify``.
A team's workers connect with it instead of the platform's credentials, which reach every queue
of the vhost (docs/security.md, "Broker: what a team's credentials reach")."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from rabbit.urls import with_credentials
from scheduling.audit import actions
from scheduling.audit.services import audit_record
from scheduling.config.conf import broker
from scheduling.core.errors import Conflict
from scheduling.models import Team
from scheduling.teams import broker_access

PASSWORD_BYTES = 24  # 32 URL-safe characters


@dataclass(frozen=True)
class TeamBrokerUser:
    user: str
    url: str  # the AMQP URL with the password: shown once, kept nowhere
    rotated: bool


def team_broker_user_ensure(*, team: Team, rotate: bool = False) -> TeamBrokerUser:
    """Make the team's RabbitMQ user with a new password and the team's permissions on the
    platform's vhost (``rotate``: an existing user gets a new password, its permissions set
    again). An existing user without ``rotate`` is a Conflict: its password was shown once when
    it was made and is kept nowhere, so no URL can be given for it."""
    target = broker()
    management = target.management
    name = broker_access.user_name(team.name)
    existing = management.user(name) is not None
    if existing and not rotate:
        raise Conflict(f"team {team.name!r} has a broker user ({name}) already; its password was shown when it was "
                       "made: --rotate gives it a new one (connections open with the old one stay open)")
    password = secrets.token_urlsafe(PASSWORD_BYTES)
    management.put_user(name, password, tags="")
    management.put_permissions(target.vhost, name, **broker_access.permissions(team.name))
    audit_record(action=actions.TEAM_BROKER_USER_ROTATE if existing else actions.TEAM_BROKER_USER_CREATE,
                 obj=team, team=team, after={"user": name, "vhost": target.vhost})
    return TeamBrokerUser(name, with_credentials(target.url, name, password), existing)


def team_broker_user_check(*, url: str | None = None) -> list[str]:
    """One line per team user on the vhost whose permissions differ from its team's (wider, or
    a team the platform does not have), per topic permission one has, and per team user with
    tags (management rights). Empty: every team user is as made."""
    target = broker(url)
    management = target.management
    teams = set(Team.objects.values_list("name", flat=True))
    problems = []
    for row in management.vhost_permissions(target.vhost):
        team = broker_access.team_of_user(row.get("user", ""))
        if team is None:
            continue
        if team not in teams:
            problems.append(f"broker user {row['user']} reaches vhost {target.vhost} but there is no team {team!r}")
            continue
        problems += [f"broker user {row['user']}: {why}; fix: team_broker_user {team} --rotate"
                     for why in broker_access.permission_problems(team, row)]
    for row in management.vhost_topic_permissions(target.vhost):
        if broker_access.team_of_user(row.get("user", "")) is not None:
            problems.append(f"broker user {row['user']} has topic permissions on {row.get('exchange')!r}, which "
                            "no team user needs")
    for row in management.users():
        if broker_access.team_of_user(row.get("name", "")) is not None and _tags(row):
            problems.append(f"broker user {row['name']} has tags {_tags(row)!r} (management rights): a team user has none; "
                            "fix: team_broker_user --rotate sets none")
    return problems


def _tags(row: Mapping[str, object]) -> str:
    """A management API user's tags, a list (or a comma-separated string, as older servers give)."""
    tags = row.get("tags") or ""
    return ",".join(tags) if isinstance(tags, list) else str(tags)
