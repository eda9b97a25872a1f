"""An endpoint's broker queue: ``<team>--<name>``, so two teams' ``billing`` are two queues and no
team's name can reach a platform queue, a broker-reserved one or another team's. A team name
never holds ``--`` (models/teams.py), so the first ``--`` of a queue ends its team.

Only an operator binds an endpoint to an exact queue (NServiceBus interop, a Celery queue that
``DelayedTask`` delays tasks for); such a name may not look like a team's queue, nor be one the
platform or the broker owns. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable

SEPARATOR = "--"
TEAM_NAMESPACE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*--")  # what every derived queue starts with
RESERVED_PREFIXES = ("amq.", "dp.")  # the broker's own; the platform's cascades and queues
# a team's Celery workers' own names after "<team>--" (teams/broker_access.py): control_exchange, events
WORKER_CONTROL, WORKER_EVENTS = "celery", "celeryev"
# a queue or exchange name ending in a team's control resources: <node>.<team>--celery.pidbox
TEAM_WORKER_TAIL = re.compile(r"\.[a-z0-9]+(?:-[a-z0-9]+)*--" + re.escape(WORKER_CONTROL) + r"\.pidbox$")


def queue_of(team: str, name: str) -> str:
    return f"{team}{SEPARATOR}{name}"


def name_problem(name: str) -> str | None:
    """Why an endpoint's name reads as a queue someone else owns (refused even though its queue
    would be ``<team>--<name>``: an operator reading a list must not mistake it), or None."""
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"names starting with {prefix!r} are the broker's or the platform's own"
    if name in (f"{WORKER_CONTROL}.pidbox", WORKER_EVENTS) or name.startswith(f"{WORKER_EVENTS}."):
        return f"{name!r} is one of the names the team's Celery workers declare for themselves"
    return None


def exact_queue_problem(queue: str, *, platform_queues: Iterable[str], prefixes: Iterable[str],
                        celery_queues: Iterable[str], consumed: bool) -> str | None:
    """Why an operator may not bind an endpoint to this exact queue, or None. ``platform_queues``:
    the relay queue and the like; ``prefixes``: the cascades' prefixes; ``celery_queues``: Celery's
    task queues, which only a celery_queue endpoint (``consumed`` False: the platform's workers
    never read it) may name."""
    if TEAM_NAMESPACE.match(queue):
        return f"{queue!r} has the form of a team's queue (<team>--<name>)"
    if TEAM_WORKER_TAIL.search(queue):
        return f"{queue!r} has the form of a team's worker control queue (<node>.<team>--celery.pidbox)"
    for prefix in (*RESERVED_PREFIXES, *(p for p in prefixes if p)):
        if queue.startswith(prefix):
            return f"queues starting with {prefix!r} are the broker's or the platform's own"
    if queue in set(platform_queues):
        return f"{queue!r} is one of the platform's own queues"
    if consumed and queue in set(celery_queues):
        return (f"{queue!r} is a Celery task queue: the platform's workers would consume its tasks; only a "
                f"celery_queue endpoint may deliver into it")
    return None
