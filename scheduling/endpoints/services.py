"""Endpoints: create, activate/deactivate, and bind their queues on the broker."""

from __future__ import annotations

import logging
import math
from datetime import timedelta

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from rabbit import BrokerUnavailable, TopologyMissing
from scheduling.audit import actions
from scheduling.audit.services import REDACTED, audit_changed, audit_record, audit_values
from scheduling.config.conf import broker, conf
from scheduling.core.errors import Conflict, Unavailable
from scheduling.core.lifecycle import IN_FLIGHT_VALUES
from scheduling.models import (
    DeliveryMode,
    Endpoint,
    EndpointHealth,
    ScheduledMessage,
    Team,
    TopologyVersion,
    default_team_id,
)
from scheduling.security import guards, secret_box, webhook_signing
from scheduling.teams import queues
from scheduling.teams.quotas import (
    team_check_count,
    team_lock_counts,
    team_task_refusal,
    team_webhook_networks,
)
from scheduling.versions.selectors import (
    topology_version_get,
    topology_version_get_default,
    topology_version_list,
    topology_version_list_provisioned,
)
from topology import cascade

log = logging.getLogger(__name__)

MAX_SECRET_OVERLAP_SECONDS = 30 * 86400  # how long a rotated-out secret may keep signing


UNCHANGED = object()  # endpoint_update: a limit not given (None is "no limit")


def _version(topology: str | TopologyVersion | None) -> TopologyVersion:
    if isinstance(topology, TopologyVersion):
        return topology
    version = topology_version_get(name=topology) if topology else topology_version_get_default()
    if version is None:
        raise ValidationError({"topology": f"unknown topology version {topology!r}"})
    return version


def _carrying(rows, name: str) -> list[cascade.Version]:
    """The cascades of these versions that can deliver to ``name`` (a dotted name: direct only)."""
    return [v for v in {row.cascade for row in rows} if cascade.carries(v, name)]


def endpoint_bind(*, endpoint: Endpoint) -> list[str]:
    """Declare the endpoint's queue and bind it on every provisioned version's delivery
    exchange that can carry it (``#.<queue>`` on v1/v2, ``<queue>`` on v3), so senders on
    any version reach it. A native endpoint also needs its own version's cascade; a
    timeout-manager endpoint needs only its queue. Returns the prefixes."""
    rows = list(topology_version_list_provisioned())
    if endpoint.delivery_mode == DeliveryMode.NATIVE:
        rows.append(endpoint.topology)
    versions = sorted(_carrying(rows, endpoint.queue), key=lambda v: v.prefix)
    try:
        with broker().session() as session:
            session.declare_queue(cascade.endpoint_queue(endpoint.queue, conf().queue_type))
            for version in versions:
                session.bind(cascade.endpoint_binding(version, endpoint.queue))
    except BrokerUnavailable as exc:
        raise Unavailable(f"cannot bind endpoint {endpoint.name!r}: {exc}") from None
    except TopologyMissing as exc:
        raise Conflict(
            f"cannot bind endpoint {endpoint.name!r}: {exc}; provision the cascade first "
            f"(manage.py provision_delays --version {endpoint.topology.name})"
        ) from None
    return [v.prefix for v in versions]


def _check_handler(endpoint: Endpoint) -> None:
    """What the handler would reach, by the guards (no webhook into the platform's own network
    but what the team was granted; only tasks the platform's and the team's allowlists allow);
    the worker checks again when it sends."""
    why = None
    if endpoint.handler == Endpoint.Handler.WEBHOOK:
        why = guards.webhook_url_refusal(endpoint.handler_target, team_webhook_networks(team=endpoint.team))
    elif endpoint.handler == Endpoint.Handler.CELERY_TASK:
        why = team_task_refusal(team=endpoint.team, task=endpoint.handler_target)
    if why:
        raise ValidationError({"handler_target": why})


def _celery_queues() -> set[str]:
    """The queues Celery's workers of this platform read tasks from (its default queue included)."""
    app_conf = current_app.conf
    return {q.name for q in app_conf.task_queues or ()} | {app_conf.task_default_queue or "celery"}


def _check_queue(endpoint: Endpoint, exact: bool) -> None:
    """An exact queue (an operator's) must be routable and owned by nobody else; the name must not
    read as a platform or broker queue (docs/guides/teams.md#names-and-queues)."""
    why = queues.name_problem(endpoint.name) if endpoint.name else None
    if why:
        raise ValidationError({"name": why})
    if not exact:
        return
    if not isinstance(endpoint.queue, str) or not cascade.DOTTED_DESTINATION_RE.match(endpoint.queue) \
            or len(endpoint.queue) > 255:
        raise ValidationError({"queue": "use letters, digits, '-' and '_', in words joined by '.' (255 at most)"})
    why = queues.exact_queue_problem(
        endpoint.queue, platform_queues=(conf().relay_queue,), prefixes=[v.prefix for v in topology_version_list()],
        celery_queues=_celery_queues(), consumed=endpoint.handler != Endpoint.Handler.CELERY_QUEUE)
    if why:
        raise ValidationError({"queue": why})


def endpoint_queue_is_exact(*, endpoint: Endpoint) -> bool:
    """Whether the endpoint's queue is an exact name (an operator's, or from before teams) rather
    than its team's ``<team>--<name>``."""
    return endpoint.queue != queues.queue_of(endpoint.team.name, endpoint.name)


def _new_secret(given: str | None, *, field: str) -> str:
    """A given secret in the Standard Webhooks format, or a generated one."""
    if not given:
        return webhook_signing.generate_secret()
    problem = webhook_signing.secret_problem(given)
    if problem:
        raise ValidationError({field: problem})
    return given


def _refresh_consumers(name: str) -> None:
    """Ask running workers' delivery loops to follow the endpoint table now (they also re-read
    it every few seconds, so a lost broadcast only delays this)."""
    try:
        current_app.control.broadcast("dp_sync_endpoints", reply=False)
    except Exception as exc:
        log.warning("could not broadcast the endpoint change for %s: %s", name, exc)


def endpoint_create(
    *,
    name: str,
    team: Team | None = None,
    queue: str | None = None,
    topology: str | TopologyVersion | None = None,
    handler: str = Endpoint.Handler.NONE,
    handler_target: str = "",
    webhook_secret: str | None = None,
    is_active: bool = True,
    delivery_mode: str = DeliveryMode.NATIVE,
    max_deliveries_per_second: int | None = None,
    max_concurrent: int | None = None,
    max_deliveries_per_second_per_key: int | None = None,
    max_concurrent_per_key: int | None = None,
    webhook_timeout_seconds: float | None = None,
    check_quota: bool = True,
) -> Endpoint:
    """Validate, bind the queue on the broker, then save: no row exists for an unbound queue.
    Its queue is ``<team>--<name>`` unless ``queue`` names an exact one (operators only: the
    edges pass it for them alone). A webhook endpoint's secret (``whsec_...``) is generated
    unless given and stored sealed (security/secret_box.py); the caller shows it once, from the
    returned row's ``new_webhook_secret`` ("" for other handlers). ``team``: the default team
    when None (the platform's own endpoints, DelayedTask's queues)."""
    team = team if team is not None else Team.objects.get(pk=default_team_id())
    exact = bool(queue)
    endpoint = Endpoint(
        team=team,
        name=name,
        queue=queue if exact else queues.queue_of(team.name, name if isinstance(name, str) else ""),
        topology=_version(topology),
        handler=handler,
        handler_target=handler_target or "",
        is_active=is_active,
        delivery_mode=delivery_mode,
        max_deliveries_per_second=max_deliveries_per_second,
        max_concurrent=max_concurrent,
        max_deliveries_per_second_per_key=max_deliveries_per_second_per_key,
        max_concurrent_per_key=max_concurrent_per_key,
        webhook_timeout_seconds=webhook_timeout_seconds,
    )
    endpoint.new_webhook_secret = ""  # the plaintext, for the caller to show once; never a field
    if handler == Endpoint.Handler.WEBHOOK:
        endpoint.new_webhook_secret = _new_secret(webhook_secret, field="webhook_secret")
        endpoint.webhook_secret = secret_box.seal(endpoint.new_webhook_secret)
    _check_timeout(endpoint)
    endpoint.full_clean(validate_constraints=False)
    _check_queue(endpoint, exact)
    _check_taken(endpoint)
    _check_handler(endpoint)
    if check_quota:  # not for the platform's own (DelayedTask's queues)
        team_check_count(team=team, quota="endpoints", used=team.endpoints.count())
    endpoint_bind(endpoint=endpoint)
    try:
        with transaction.atomic():
            if check_quota:  # again, under the team's lock: two at the quota less one cannot both pass
                team_lock_counts(team_id=team.pk)
                team_check_count(team=team, quota="endpoints", used=team.endpoints.count())
            endpoint.save()
            audit_record(action=actions.ENDPOINT_CREATE, obj=endpoint, team=team, after=audit_values(obj=endpoint))
    except IntegrityError:  # created concurrently since the checks
        raise ValidationError({"name": f"team {team.name} has an endpoint {name!r} already"}) from None
    transaction.on_commit(lambda: _refresh_consumers(endpoint.name))
    return endpoint


def _check_taken(endpoint: Endpoint) -> None:
    """The team's name and the platform's queue, before the broker is touched."""
    if Endpoint.objects.filter(team=endpoint.team, name=endpoint.name).exists():
        raise ValidationError({"name": f"team {endpoint.team.name} has an endpoint {endpoint.name!r} already"})
    if Endpoint.objects.filter(queue=endpoint.queue).exists():
        raise ValidationError({"queue": f"the queue {endpoint.queue!r} is another endpoint's"})


def _check_timeout(endpoint: Endpoint) -> None:
    """A deadline the model's checks cannot compare (NaN passes every bound) is no number."""
    value = endpoint.webhook_timeout_seconds
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
        raise ValidationError({"webhook_timeout_seconds": "must be a finite number of seconds"})


def endpoint_set_active(*, endpoint: Endpoint, active: bool) -> Endpoint:
    """Deactivating pauses delivery (messages wait in the queue) and refuses new schedules;
    activating re-binds the queue and resumes consumption (an endpoint the platform disabled is
    enabled: endpoint_enable)."""
    if active and endpoint.disabled_at is not None:
        return endpoint_enable(endpoint=endpoint)
    if active:
        endpoint_bind(endpoint=endpoint)
    with transaction.atomic():
        was = endpoint.is_active
        endpoint.is_active = active
        endpoint.save(update_fields=["is_active", "updated_at"])
        if was != active:
            audit_record(action=actions.ENDPOINT_ACTIVATE if active else actions.ENDPOINT_DEACTIVATE, obj=endpoint,
                         team=endpoint.team, before={"is_active": was}, after={"is_active": active})
    transaction.on_commit(lambda: _refresh_consumers(endpoint.name))
    return endpoint


def endpoint_enable(*, endpoint: Endpoint) -> Endpoint:
    """Resume an endpoint, in particular one the platform disabled for failing too long: its
    queue re-bound, active again, its disabled state cleared and its health reset (no failures
    counted, nothing paused, the circuit closed), so its waiting messages are called at once
    rather than the circuit's next probe. Its last success, failure and error stay, as history.
    Audited."""
    endpoint_bind(endpoint=endpoint)
    with transaction.atomic():
        current = Endpoint.objects.select_for_update(of=("self",)).select_related("team", "topology").get(
            pk=endpoint.pk)
        before = {"is_active": current.is_active, "disabled_at": current.disabled_at,
                  "disabled_reason": current.disabled_reason}
        health = EndpointHealth.objects.filter(endpoint=current)
        reset = health.exclude(consecutive_failures=0, failing_since=None, paused_until=None, circuit_opened=0)
        health_before = reset.values("consecutive_failures", "failing_since", "paused_until", "circuit_opened").first()
        current.is_active, current.disabled_at, current.disabled_reason = True, None, ""
        current.save(update_fields=["is_active", "disabled_at", "disabled_reason", "updated_at"])
        health.update(consecutive_failures=0, failing_since=None, paused_until=None, circuit_opened=0)
        after = {"is_active": True, "disabled_at": None, "disabled_reason": ""}
        if before != after or health_before:
            audit_record(action=actions.ENDPOINT_ENABLE, obj=current, team=current.team,
                         before={**before, **({"health": health_before} if health_before else {})}, after=after)
    transaction.on_commit(lambda: _refresh_consumers(current.name))
    return current


def endpoint_update(
    *,
    endpoint: Endpoint,
    topology: str | TopologyVersion | None = None,
    delivery_mode: str | None = None,
    handler: str | None = None,
    handler_target: str | None = None,
    max_deliveries_per_second: int | None | object = UNCHANGED,
    max_concurrent: int | None | object = UNCHANGED,
    max_deliveries_per_second_per_key: int | None | object = UNCHANGED,
    max_concurrent_per_key: int | None | object = UNCHANGED,
    webhook_timeout_seconds: float | None | object = UNCHANGED,
) -> Endpoint:
    """Change where *new* messages go (another version, the timeout manager), how they are
    handled, its flow control (None: no limit) or its webhook deadline (None: the platform's;
    the workers follow both within DELAY_CONSUMER_SYNC_SECONDS, at once when the broadcast
    reaches them), with the same validation as creating it. The name never changes (it is the queue
    and its binding). Messages already scheduled keep theirs; the queue receives from every
    provisioned version, so nothing in flight is stranded. Moving an active endpoint binds its
    queue on the new version before the row says so."""
    with transaction.atomic():
        current = Endpoint.objects.select_for_update(of=("self",)).select_related("topology", "team").get(
            pk=endpoint.pk)
        before = audit_values(obj=current)
        version = current.topology if topology is None else _version(topology)
        moved, current.topology = version.pk != current.topology_id, version
        if delivery_mode is not None and delivery_mode != current.delivery_mode:
            moved, current.delivery_mode = True, delivery_mode
        if handler is not None:
            current.handler = handler
        if handler_target is not None:
            current.handler_target = handler_target
        flow_changed = False
        for name, value in (("max_deliveries_per_second", max_deliveries_per_second),
                            ("max_concurrent", max_concurrent),
                            ("max_deliveries_per_second_per_key", max_deliveries_per_second_per_key),
                            ("max_concurrent_per_key", max_concurrent_per_key),
                            ("webhook_timeout_seconds", webhook_timeout_seconds)):
            if value is not UNCHANGED and value != getattr(current, name):
                setattr(current, name, value)
                flow_changed = True
        _check_wire_change(current, before_handler=before["handler"])
        current.new_webhook_secret = ""
        if current.handler == Endpoint.Handler.WEBHOOK and not current.webhook_secret:
            current.new_webhook_secret = webhook_signing.generate_secret()
            current.webhook_secret = secret_box.seal(current.new_webhook_secret)
        _check_timeout(current)
        current.full_clean(validate_constraints=False)
        _check_handler(current)
        if endpoint_queue_is_exact(endpoint=current):
            _check_queue(current, exact=True)
        if moved and current.is_active:
            endpoint_bind(endpoint=current)
        current.save()
        old, new = audit_changed(before=before, after=audit_values(obj=current))
        if new:
            audit_record(action=actions.ENDPOINT_UPDATE, obj=current, team=current.team, before=old, after=new)
    if flow_changed or current.handler != before["handler"]:  # a celery_queue's queue is its workers', not the loop's
        transaction.on_commit(lambda: _refresh_consumers(current.name))
    return current


def _is_task_wire(handler: str) -> bool:
    """Whether messages of this handler travel as Celery task messages (the user's workers run
    them) rather than the platform's own deliver message: the two wires a row is built for."""
    return handler == Endpoint.Handler.CELERY_QUEUE


def _check_wire_change(current: Endpoint, *, before_handler: str) -> None:
    """A handler may move to or from ``celery_queue`` only with nothing in flight: the rows in flight
    were validated and are built for the wire they were scheduled on (a task message, or the
    platform's deliver message), and one built for the other would fail. The caller holds the
    endpoint's row FOR UPDATE: a schedule locks it FOR KEY SHARE (endpoint_lock_wires) and its
    insert waits, so one committed before is counted here and one after sees the new handler."""
    if _is_task_wire(before_handler) == _is_task_wire(current.handler):
        return
    in_flight = ScheduledMessage.objects.filter(endpoint=current, status__in=IN_FLIGHT_VALUES).count()
    if in_flight:
        raise ValidationError({"handler": (
            f"cannot change from {before_handler} to {current.handler} while {in_flight:,} message(s) are in "
            f"flight: they were made for the {before_handler} handler. Wait until they are delivered, or cancel "
            f"them, then change it")})


def endpoint_lock_wires(*, endpoints: list[Endpoint]) -> None:
    """Lock the endpoints messages are being scheduled for until the transaction ends (FOR KEY SHARE:
    the lock their rows' foreign key takes anyway, shared by concurrent schedules, waited for only by
    endpoint_update's FOR UPDATE) and check that each still has the wire the messages were validated
    and built for: a handler moved to or from ``celery_queue`` meanwhile is a Conflict (send them
    again), never a row its wire cannot carry."""
    given = {endpoint.pk: endpoint for endpoint in endpoints}
    if not given:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, handler FROM {Endpoint._meta.db_table} WHERE id = ANY(%s) ORDER BY id "
                       f"FOR KEY SHARE", [list(given)])
        handlers = dict(cursor.fetchall())
    for pk, endpoint in given.items():
        if pk in handlers and _is_task_wire(handlers[pk]) != _is_task_wire(endpoint.handler):
            raise Conflict(f"endpoint {endpoint.name!r} changed its handler to {handlers[pk]} while messages were "
                           f"scheduled for it; send them again")


def endpoint_rotate_secret(*, endpoint: Endpoint, secret: str | None = None,
                           previous_valid_seconds: int = 86400) -> Endpoint:
    """Give a webhook endpoint a new signing secret (generated unless given). The current one
    keeps signing beside it for ``previous_valid_seconds`` (0: retired at once), so receivers
    switch without a gap; a secret rotated out earlier stops at once. Both are stored sealed; the
    caller shows the new secret once, from the returned row's ``new_webhook_secret``."""
    if isinstance(previous_valid_seconds, bool) or not isinstance(previous_valid_seconds, int) or \
            not 0 <= previous_valid_seconds <= MAX_SECRET_OVERLAP_SECONDS:
        raise ValidationError({"previous_valid_seconds": f"must be a whole number of seconds from 0 to "
                                                         f"{MAX_SECRET_OVERLAP_SECONDS:,} (30 days)"})
    new = _new_secret(secret, field="secret")
    with transaction.atomic():
        current = Endpoint.objects.select_for_update(of=("self",)).select_related("team").get(pk=endpoint.pk)
        if current.handler != Endpoint.Handler.WEBHOOK:
            raise ValidationError({"handler": f"only webhook endpoints sign with a secret; this one is {current.handler}"})
        old = secret_box.open(current.webhook_secret)  # the plaintexts compare: sealing is randomised
        if new == old:
            raise ValidationError({"secret": "is the current secret; give a new one or leave it out"})
        overlap = previous_valid_seconds > 0 and bool(old)
        current.webhook_secret_previous = secret_box.seal(old) if overlap else ""  # sealed, if it was not
        current.webhook_secret_previous_expires_at = (
            timezone.now() + timedelta(seconds=previous_valid_seconds) if overlap else None)
        current.webhook_secret = secret_box.seal(new)
        current.new_webhook_secret = new
        current.save(update_fields=["webhook_secret", "webhook_secret_previous", "webhook_secret_previous_expires_at",
                                    "updated_at"])
        audit_record(action=actions.ENDPOINT_ROTATE_SECRET, obj=current, team=current.team,
                     before={"webhook_secret": REDACTED if old else ""},
                     after={"webhook_secret": f"{REDACTED} (new)",
                            "webhook_secret_previous_expires_at": current.webhook_secret_previous_expires_at})
    log.info("webhook secret of endpoint %s rotated; the previous one signs until %s", current.name,
             current.webhook_secret_previous_expires_at or "now")
    return current
