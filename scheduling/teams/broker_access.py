"""What a team's own RabbitMQ user may reach on the platform's vhost, as the three permission
regexes RabbitMQ checks (configure, write, read), and the Celery settings that put a team's
workers' own resources under the team's name. Pure (docs/security.md, "Broker: what a team's
credentials reach").

RabbitMQ matches a permission regex *unanchored* against a resource's name (an exchange or a
queue); publishing needs write on the exchange, consuming and purging read on the queue, binding
write on the queue and read on the exchange, declaring and deleting configure. So:

- read and write: the team's queues and exchanges, ``<team>--…`` (its endpoints' queues are
  ``<team>--<name>``, teams/queues.py), and the names Celery derives from its control exchange
  (``<node>.<team>--celery.pidbox``, ``reply.<team>--celery.pidbox``, ``<oid>.reply.<team>--celery.pidbox``);
- configure: only what a worker declares for itself (its pidbox, reply and event exchanges and
  queues), never an endpoint's queue (the platform declares those; an endpoint may not be named
  like one of them: teams/queues.py name_problem);
- nothing else: not the default exchange (``amq.default``: write there would publish into any
  queue by its name, the cascades' included), not the cascades (``dp.…``), the relay, Celery's
  queues of the platform or another team's.

A name that merely *ends* like a team's control resource but starts like some team's queue
(``<other>--x.<team>--celery.pidbox``, an endpoint name may hold dots and ``--``) is refused by
the lookahead: that is the other team's queue; an operator's exact queue may not end so
(teams/queues.py exact_queue_problem).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from scheduling.teams.queues import SEPARATOR, WORKER_CONTROL, WORKER_EVENTS

USER_PREFIX = "dp-team."  # a team's RabbitMQ user is dp-team.<team>: what verify looks for
CONTROL = WORKER_CONTROL  # Celery's control_exchange, after the team's prefix: <team>--celery
EVENTS = WORKER_EVENTS  # Celery's event_exchange and event_queue_prefix, after the team's prefix
# what any team's queue starts with (team names: models/teams.py team_name_validator)
ANY_TEAM = r"[a-z0-9]+(?:-[a-z0-9]+)*" + re.escape(SEPARATOR)


def user_name(team: str) -> str:
    return f"{USER_PREFIX}{team}"


def team_of_user(name: str) -> str | None:
    """The team a RabbitMQ user name stands for (None: not a team's user)."""
    return name[len(USER_PREFIX):] if name.startswith(USER_PREFIX) and len(name) > len(USER_PREFIX) else None


def worker_settings(team: str) -> dict[str, str]:
    """The Celery settings of a team's worker: its remote control and events under the team's
    name (delayclient.celery.team_worker_settings sets the same; docs/guides/python-client.md)."""
    prefix = f"{team}{SEPARATOR}"
    return {"control_exchange": prefix + CONTROL, "event_exchange": prefix + EVENTS,
            "event_queue_prefix": prefix + EVENTS}


def _own(team: str) -> tuple[str, str]:
    """(the team's prefix, the tail of its control resources), escaped for a regex."""
    prefix = re.escape(f"{team}{SEPARATOR}")
    return prefix, rf"\.{prefix}{CONTROL}\.pidbox"


def permissions(team: str) -> dict[str, str]:
    """The team user's permissions on the platform's vhost: {"configure", "write", "read"}."""
    prefix, control_tail = _own(team)
    control = rf"(?!{ANY_TEAM}).+{control_tail}"  # node, reply exchange and reply queues
    worker_own = rf"^(?:{prefix}{CONTROL}\.pidbox|{prefix}{EVENTS}(?:\..+)?|{control})$"
    reach = rf"^(?:{prefix}.+|{control})$"
    return {"configure": worker_own, "write": reach, "read": reach}


def permission_problems(team: str, found: Mapping[str, object]) -> list[str]:
    """How a team user's permissions (a management API row) differ from the team's: each one
    not exactly the team's is reported (a regex's reach cannot be compared in general, and any
    other one is either wider or breaks the team's workers)."""
    expected = permissions(team)
    return [f"{kind} {found.get(kind)!r} (the team's is {regex!r})"
            for kind, regex in expected.items() if found.get(kind) != regex]


def reaches(regex: str, name: str) -> bool:
    """Whether RabbitMQ would grant ``name`` under ``regex`` (an unanchored match, as the broker's)."""
    return re.search(regex, name) is not None
