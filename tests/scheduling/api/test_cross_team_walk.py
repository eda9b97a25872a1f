"""The fence, walked (issue 46, item 7): every operation of the OpenAPI schema the platform serves,
called with team A's keys on team B's objects, with A's keys that each miss one scope, and with a
viewer's key. Nothing here names a route: a new route is in the schema, so it is walked; a path
parameter the walker cannot fill fails the test (it is never skipped).

How it decides, per call (each made in a savepoint rolled back after it, so every call sees the
same two teams):
- never a 5xx; a refused request (4xx) changes no row; no answer of A's shows an identifier of B's
  it was not sent; no call by A changes a row of B's;
- (a) A's all-scope key and A's admin's key on B's objects: never a 2xx where the path names B's
  object, and the same status as for an object that does not exist (no existence oracle: that is
  also how a name of B's in the body is judged, and B's object under A's in a path of two, as
  /api/teams/<A>/invitations/<B's>/revoke/);
- (b) A's keys each missing one scope, on A's own objects: no 2xx without the scope the view
  declares for the action (teams.roles.Action), nor without the scope the change it made needs
  (judged from the rows it changed: CHANGE_SCOPES below), nor a change only a person may make;
- (c) the keys of a viewer and of a member of A: nothing their role may not do (by what the view
  declares, and by what the change needs: a viewer no write, a member no endpoint, key or member);
  on a person's own object (a view with IsPerson: an invitation to A's admin, A's admin's own key)
  exactly what an object that does not exist gets: one person never answers another's invitation;
- leaks: an answer that carries a whole key or webhook secret says Cache-Control: no-store; a
  webhook URL's query string is never shown to a viewer nor in the audit log.
The body of each write is built from the schema (required properties, and BODY_VALUES by name) and
proved valid first: the same call with full rights on A's own object must succeed for at least one
of the object's variants (a pending message, a delivered one, a task...), so that a refusal comes
from the fence, not from validation. Every violation is collected and reported at once.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.urls import resolve
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from scheduling.api.team_views import IsPerson
from scheduling.audit.context import AuditContext, audited
from scheduling.core.caller import caller_for_command
from scheduling.core.lifecycle import FINISHED_VALUES, IN_FLIGHT_VALUES, Status
from scheduling.core.roles import ADMIN, MEMBER, RANK, SCOPES, VIEWER, Action
from scheduling.endpoints.services import endpoint_create
from scheduling.events.services import event_publish, subscription_create
from scheduling.models import (
    BulkAction,
    Endpoint,
    Invitation,
    Membership,
    MessageAttempt,
    NotificationRoute,
    ScheduledMessage,
)
from scheduling.schedules.services import schedule_upsert
from scheduling.teams.invitations import invitation_create
from scheduling.teams.services import api_key_create, team_create

# Holes the walk finds in today's code that another change closes: (operationId, case, caller) ->
# the change. Each must still show (a stale entry fails the test too): empty this as they merge.
KNOWN_HOLES: dict[tuple[str, str, str], str] = {}

SAFE = {"GET", "HEAD", "OPTIONS"}
PERSON = "a person"  # what a change of keys, members or teams needs: never a team's key

# The object a path parameter names, by the collection before it: (segment, parameter) -> kind.
PATH_KINDS = {
    ("endpoints", "name"): "endpoint",
    ("messages", "id"): "message",
    ("schedules", "key"): "schedule",
    ("keys", "prefix"): "key",
    ("teams", "name"): "team",
    ("bulk-actions", "id"): "bulk action",
    ("notifications", "id"): "notification route",
    # a person's own: theirs (or another person's, of the team or not: a 404 as no such thing)
    ("invitations", "id"): "invitation",  # /api/invitations/{id}/accept/: the invited person answers
    ("invitations", "invitation_id"): "invitation",  # /api/teams/{name}/invitations/{id}/revoke/
    ("mine", "prefix"): "own key",
    ("subscriptions", "id"): "subscription",
    ("events", "id"): "event",
}
BIG_ID = (10**11, 10**12)  # numeric ids made this long, so that the leak check cannot meet them by chance


# --- the schema ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # the template: /api/messages/{id}/claim/
    operation_id: str
    body: dict | None  # the requestBody's JSON schema
    query: tuple  # query parameters: (name, schema, required)

    @property
    def write(self) -> bool:
        return self.method not in SAFE

    @property
    def label(self) -> str:
        return f"{self.method} {self.path} ({self.operation_id})"

    def parameters(self) -> list[tuple[str, str]]:
        """(parameter, kind or None) of the path, in order."""
        found, previous = [], None
        for part in self.path.strip("/").split("/"):
            if part.startswith("{"):
                name = part[1:-1]
                found.append((name, PATH_KINDS.get((previous, name))))
            else:
                previous = part
        return found


def load_schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def operations(schema: dict) -> list[Operation]:
    found = []
    for path, methods in schema["paths"].items():
        for method, spec in methods.items():
            if method.upper() not in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
                continue
            content = (spec.get("requestBody") or {}).get("content", {}).get("application/json", {})
            query = tuple((p["name"], p.get("schema", {}), bool(p.get("required")))
                          for p in spec.get("parameters", []) if p["in"] == "query")
            found.append(Operation(method.upper(), path, spec["operationId"], content.get("schema"), query))
    return found


SCHEMA = load_schema()
COMPONENTS = SCHEMA["components"]["schemas"]
OPERATIONS = operations(SCHEMA)


def unfillable() -> list[str]:
    return [f"{op.label}: path parameter {{{name}}}" for op in OPERATIONS for name, kind in op.parameters()
            if kind is None]


# --- two teams with one of everything, and a ghost ------------------------------------------------


@dataclass
class World:
    """A team's objects, by kind and variant, and what names them in a body."""

    label: str
    team_id: int | None = None
    team_ids: set = field(default_factory=set)  # its team and its club (the team inviting its admin)
    user_ids: set = field(default_factory=set)  # its people (their own keys are theirs)
    objects: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> variant -> path value
    refs: dict[str, str] = field(default_factory=dict)  # body property -> value
    clients: dict[str, APIClient] = field(default_factory=dict)
    message_ids: set = field(default_factory=set)  # its messages', its schedule's runs included

    def identifiers(self) -> set[str]:
        """What only this team's answers may show."""
        named = {value for variants in self.objects.values() for value in variants.values()}
        return named | set(self.refs.values()) | self.message_ids


def _client(**key) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(**key).key}")
    client.raise_request_exception = False
    return client


def _message(endpoint: Endpoint, *, status: str, due_in: timedelta, key: str | None = None, **fields) -> str:
    now = timezone.now()
    row = ScheduledMessage.objects.create(
        endpoint=endpoint, topology=endpoint.topology, payload={"task": "testapp.plain_receipt"}
        if endpoint.handler == Endpoint.Handler.CELERY_QUEUE else {"n": 1}, requested_delay_ms=0,
        due_at=now + due_in, status=status, idempotency_key=key, created_at=now - timedelta(hours=1),
        published_at=now - timedelta(hours=1) if status != Status.PENDING else None, **fields)
    return str(row.id)


def build_world(label: str) -> World:
    """Made as a command makes things, so that the audit log has the team's rows too."""
    with audited(AuditContext(source="command", caller=caller_for_command("walker"))):
        return _build_world(label)


def _build_world(label: str) -> World:
    tag = f"{label}-{uuid.uuid4().hex[:6]}"
    world = World(label)
    team = team_create(name=f"walk-{tag}")
    club = team_create(name=f"club-{tag}")  # another team of the world's: it invited the admin
    world.team_id, world.team_ids = team.pk, {team.pk, club.pk}
    users = {}
    for role in (ADMIN, VIEWER, MEMBER):
        users[role] = get_user_model().objects.create_user(f"walker-{tag}-{role}", password="pw")
        Membership.objects.create(team=team, user=users[role], role=role)
    guest = get_user_model().objects.create_user(f"walker-{tag}-guest", password="pw")  # in the club only
    Membership.objects.create(team=club, user=guest, role=MEMBER)
    world.user_ids = {user.pk for user in (*users.values(), guest)}
    invitations = {  # the admin's to answer (the club's), and the team's to a user outside it
        "to admin": invitation_create(team=club, username=users[ADMIN].username, role=VIEWER),
        "to guest": invitation_create(team=team, username=guest.username, role=VIEWER),
    }
    for variant, invitation in invitations.items():
        invitations[variant] = str(random.randrange(*BIG_ID))
        Invitation.objects.filter(pk=invitation.pk).update(id=invitations[variant])
    url_token = f"walker-secret-{uuid.uuid4().hex[:12]}"
    hook = endpoint_create(name=f"hook-{tag}", team=team, handler=Endpoint.Handler.WEBHOOK,
                           handler_target=f"http://127.0.0.1:9/hook?token={url_token}")
    tasks = endpoint_create(name=f"tasks-{tag}", team=team, handler=Endpoint.Handler.CELERY_QUEUE)
    notes = endpoint_create(name=f"notes-{tag}", team=team)  # its notification route's (record-only)
    route = NotificationRoute.objects.create(team=team, endpoint=notes, events=["message.failed"])
    task_id = f"task-{tag}"
    now = timezone.now()
    messages = {
        "waiting": _message(hook, status=Status.PUBLISHED, due_in=timedelta(hours=1)),
        "delivered": _message(hook, status=Status.DELIVERED, due_in=-timedelta(minutes=1), delivered_at=now,
                              finished_at=now, delivery_count=1, lateness_ms=0),
        "failed": _message(hook, status=Status.FAILED, due_in=-timedelta(minutes=1), finished_at=now,
                           attempts=1),
        "task-due": _message(tasks, status=Status.PUBLISHED, due_in=-timedelta(seconds=1),
                             key=f"{task_id}#retry1"),
        "task-early": _message(tasks, status=Status.PUBLISHED, due_in=timedelta(days=1), key=task_id),
    }
    MessageAttempt.objects.create(message_id=messages["delivered"], number=1, started_at=now, duration_ms=5,
                                  outcome="http_status", status_code=200, excerpt="ok", worker="w@walker")
    schedule, _ = schedule_upsert(team=team, key=f"walk-{tag}.hourly", endpoint=hook, payload={"n": 1},
                                  interval_seconds=3600)
    spare = api_key_create(team=team, scopes=["read"], name="spare")
    own = api_key_create(user=users[ADMIN], name="own")  # the admin's own, beside the one the walk uses
    subscription = subscription_create(team=team, topic="walk.#", endpoint=hook.name)
    event = event_publish(team=team, topic="walk.made", payload={"n": 1}, delay=3600).event
    quiet = event_publish(team=team, topic="quiet", payload={"n": 1}, delay=3600).event  # matched nothing
    bulk = BulkAction.objects.create(id=random.randrange(*BIG_ID), kind=BulkAction.Kind.CANCEL, team=team,
                                     filters={"status": Status.FAILED}, matched=0, requested_by="walker",
                                     state=BulkAction.State.DONE, finished_at=now)
    world.objects = {
        "endpoint": {"webhook": hook.name, "celery": tasks.name},
        "message": messages,
        "schedule": {"interval": schedule.key},
        "key": {"spare": spare.row.prefix},
        "team": {"own": team.name},
        "bulk action": {"done": str(bulk.pk)},
        "notification route": {"own": str(route.pk)},
        "invitation": invitations,
        "own key": {"own": own.row.prefix},
        "subscription": {"hook": str(subscription.pk)},
        "event": {"fanned out": str(event.pk), "quiet": str(quiet.pk)},
    }
    world.refs = {"team": team.name, "club": club.name, "endpoint": hook.name, "celery_endpoint": tasks.name,
                  "username": users[MEMBER].username, "task_id": task_id, "schedule": schedule.key,
                  "url_token": url_token, "invitee": guest.username,
                  **{f"user-{role}": user.username for role, user in users.items()}}
    world.message_ids = {str(pk) for pk in ScheduledMessage.objects.filter(endpoint__team=team)
                         .values_list("id", flat=True)}  # its variants and its schedule's runs
    world.clients = {
        "all-scope key": _client(team=team, scopes=["all"]),
        "admin's key": _client(user=users[ADMIN]),
        "viewer's key": _client(user=users[VIEWER]),
        "member's key": _client(user=users[MEMBER]),
        **{f"key without {scope}": _client(team=team, scopes=sorted(set(SCOPES) - {scope}))
           for scope in SCOPES},
    }
    return world


def ghost_world() -> World:
    """Names of nothing, in the forms real ones have: what another team's object must look like."""
    tag = uuid.uuid4().hex[:6]
    world = World("ghost")
    world.objects = {
        "endpoint": {"webhook": f"ghost-{tag}", "celery": f"ghost-{tag}"},
        "message": {variant: str(uuid.uuid4()) for variant in ("waiting", "delivered", "failed", "task-due",
                                                               "task-early")},
        "schedule": {"interval": f"ghost-{tag}.hourly"},
        "key": {"spare": "dpk_Gh0st" + tag[:3]},
        "team": {"own": f"ghost-{tag}"},
        "bulk action": {"done": str(random.randrange(*BIG_ID))},
        "notification route": {"own": str(uuid.uuid4())},
        "invitation": {variant: str(random.randrange(*BIG_ID)) for variant in ("to admin", "to guest")},
        "own key": {"own": "dpk_Gh0st" + tag[3:]},
        "subscription": {"hook": str(uuid.uuid4())},
        "event": {variant: str(uuid.uuid4()) for variant in ("fanned out", "quiet")},
    }
    world.refs = {"team": f"ghost-{tag}", "endpoint": f"ghost-{tag}", "celery_endpoint": f"ghost-{tag}",
                  "username": f"ghost-{tag}", "task_id": f"ghost-{tag}", "schedule": f"ghost-{tag}.hourly",
                  "url_token": f"ghost-secret-{tag}", "invitee": f"ghost-{tag}-guest"}
    return world


# --- bodies from the schema -----------------------------------------------------------------------

# A property's value by its name ("operationId.property", then "Component.property", first): what
# the schema cannot say (which endpoint, which user) and what makes a call do something (a change,
# not an empty PATCH). A name of the team's objects comes from the world, so the same body names B's
# objects for case (a).
BODY_VALUES = {
    "team": lambda w: w.refs["team"],
    "endpoint": lambda w: w.refs["endpoint"],
    "TaskCancelRequest.endpoint": lambda w: w.refs["celery_endpoint"],
    "username": lambda w: w.refs["username"],
    "teams_invitations_create.username": lambda w: w.refs["invitee"],  # a user not in the team
    "task_id": lambda w: w.refs["task_id"],
    "schedule": lambda w: w.refs["schedule"],
    "ScheduleWriteRequest.key": lambda w: w.refs["schedule"],
    "EndpointRequest.name": lambda w: "walked-new",
    "EndpointRequest.handler": lambda w: Endpoint.Handler.WEBHOOK,  # its answer carries its new secret
    "EndpointRequest.handler_target": lambda w: "http://127.0.0.1:9/walked",
    "payload": lambda w: {"n": 1},
    "events": lambda w: ["message.failed"],
    "delay_seconds": lambda w: "3600",
    "interval_seconds": lambda w: "7200",
    "scopes": lambda w: ["read"],
    "dry_run": lambda w: False,
    "max_deliveries_per_second": lambda w: 7,
    "role": lambda w: VIEWER,
    "topic": lambda w: "walk.topic",  # a subscription's pattern (not the world's walk.#) and an event's topic
}


def _resolve(schema: dict) -> tuple[str | None, dict]:
    name = None
    while True:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            schema = COMPONENTS[name]
        elif len(schema.get("allOf", ())) == 1:
            schema = schema["allOf"][0]
        else:
            return name, schema


def example(schema: dict, world: World):
    name, schema = _resolve(schema)
    if "properties" in schema:
        return body_of(name, schema, world)
    if schema.get("enum"):
        return next(value for value in schema["enum"] if value is not None)
    kind = schema.get("type")
    if kind == "string":
        if schema.get("format") == "date-time":
            return (timezone.now() + timedelta(hours=1)).isoformat()
        if schema.get("format") == "decimal":
            return "1"
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return [example(schema.get("items", {}), world) for _ in range(max(1, schema.get("minItems", 1)))]
    return {"n": 1}


def body_of(name: str | None, schema: dict, world: World, operation_id: str = "") -> dict:
    """The required properties, and every property BODY_VALUES names."""
    body = {}
    for prop, spec in schema.get("properties", {}).items():
        if spec.get("readOnly"):
            continue
        value = (BODY_VALUES.get(f"{operation_id}.{prop}") or BODY_VALUES.get(f"{name}.{prop}")
                 or BODY_VALUES.get(prop))
        if value is not None:
            body[prop] = value(world)
        elif prop in schema.get("required", ()):
            body[prop] = example(spec, world)
    return body


BARE = "no optional query"  # a variant of a request: its required query parameters alone


def query_of(op: Operation, world: World, variant: tuple = ()) -> dict:
    """The query parameters of a request, chosen as a body's properties are (the BARE variant: only
    the required ones, as a list is mostly read)."""
    query = {}
    for name, spec, required in op.query:
        value = BODY_VALUES.get(name)
        if value is not None and BARE not in variant:
            query[name] = value(world)
        elif required:
            query[name] = example(spec, world)
    return query


# --- rows changed, and what a change needs ---------------------------------------------------------

TABLES = {model._meta.db_table: model for model in apps.get_models()
          if model._meta.managed and not model._meta.proxy and not model._meta.swapped}
IGNORED_COLUMNS = "{last_used_at}"  # a key's use is written as it authenticates (a text[] literal)
SNAPSHOT_SQL = " UNION ALL ".join(
    f"SELECT '{table}', t.{connection.ops.quote_name(model._meta.pk.column)}::text, "
    f"(to_jsonb(t) - '{IGNORED_COLUMNS}'::text[])::text FROM {connection.ops.quote_name(table)} t"
    for table, model in TABLES.items())


def snapshot() -> dict[tuple[str, str], str]:
    with connection.cursor() as cursor:
        cursor.execute(SNAPSHOT_SQL)
        return {(table, pk): row for table, pk, row in cursor.fetchall()}


@dataclass(frozen=True)
class Change:
    table: str
    pk: str
    before: dict | None
    after: dict | None

    @property
    def row(self) -> dict:
        return self.after or self.before

    def __str__(self):
        verb = "added" if self.before is None else "removed" if self.after is None else "changed"
        return f"{TABLES[self.table].__name__} {self.pk} {verb}"


def changes(before: dict, after: dict) -> list[Change]:
    def row(rows, key):
        return json.loads(rows[key]) if key in rows else None

    return [Change(*key, row(before, key), row(after, key))
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def _model(change: Change) -> str:
    return TABLES[change.table].__name__


# What a change of each model needs of a key (None: follows from another change, needs nothing of
# its own). ScheduledMessage is judged row by row (message_scopes). A model not here fails the walk.
CHANGE_SCOPES = {
    "Endpoint": {"endpoints"}, "EndpointHealth": {"endpoints"}, "EndpointFlow": {"endpoints"},
    "Schedule": {"schedules"},
    "Subscription": {"endpoints"}, "Event": {"write"},  # an event's messages are judged as messages
    "Team": {PERSON}, "Membership": {PERSON}, "ApiKey": {PERSON}, "User": {PERSON}, "Invitation": {PERSON},
    "BulkAction": {"cancel"},
    "NotificationRoute": {"endpoints"},
    "AuditEvent": None, "MessageAttempt": None, "DeliveryMinute": None,
    # a copy left in the cascade by a cancel or a reschedule: it needs what that change of its message
    # needs (cancel, write; nothing of its own for a schedule's run); a copy whose message did not change
    # is judged a cancel (scopes_needed)
    "CascadeCopy": None,
}
ROLE_OF_NEED = {action.scope: action.role for action in Action if action.scope} | {PERSON: ADMIN}
EARLY = timedelta(minutes=1)  # a message taken out of flight more than this before its due time: a cancel


def message_scopes(change: Change, *, schedules_changed: bool, celery_endpoints: set[int]) -> set[str]:
    before, after = change.before, change.after
    if schedules_changed and change.row.get("schedule"):
        return set()  # a schedule's runs follow its schedule
    if before is None:
        return {"write"} | ({"tasks"} if after["endpoint_id"] in celery_endpoints else set())
    if after is None:
        return {"cancel"}
    was, now, needs = before["status"], after["status"], set()
    if now == Status.CANCELLED and was != now:
        needs.add("cancel")
    if was in FINISHED_VALUES and now in IN_FLIGHT_VALUES:
        needs.add("cancel")  # republish, resend
    if was in IN_FLIGHT_VALUES and now == Status.DELIVERED:
        needs.add("tasks")  # a worker's claim
        if datetime.fromisoformat(before["due_at"]) > timezone.now() + EARLY:
            needs.add("cancel")  # out of flight before its time: the real hand-over will be skipped
    if was in IN_FLIGHT_VALUES and now in IN_FLIGHT_VALUES and before["due_at"] != after["due_at"]:
        needs.add("write")
    return needs


def scopes_needed(found: list[Change], celery_endpoints: set[int]) -> set[str]:
    schedules_changed = any(_model(c) == "Schedule" for c in found)
    needs = set()
    for change in found:
        model = _model(change)
        if model == "ScheduledMessage":
            needs |= message_scopes(change, schedules_changed=schedules_changed,
                                    celery_endpoints=celery_endpoints)
        elif model == "CascadeCopy" and not any(
                _model(c) == "ScheduledMessage" and c.pk == str(change.row["message_id"]) for c in found):
            needs.add("cancel")
        elif model not in CHANGE_SCOPES:
            needs.add(f"unclassified: {model} (add it to CHANGE_SCOPES)")
        else:
            needs |= CHANGE_SCOPES[model] or set()
    return needs


# a whole key (its prefix and 43 characters) or a webhook secret, not a prefix or the schema's "whsec_<base64"
CARRIES_SECRET = re.compile(r"dpk_[A-Za-z0-9_-]{40}|whsec_[A-Za-z0-9+/]{30}")


# --- the walk -----------------------------------------------------------------------------------


@dataclass
class Call:
    op: Operation
    world: World
    variant: tuple
    caller: str
    status: int
    text: str
    request: str
    found: list[Change]
    cache_control: str = ""


def declared(op: Operation, path: str):
    """The teams.roles.Action the view declares for this request, whether it declares one, and
    whether the view is a person's own (IsPerson: their invitations, their keys; no team's key)."""
    match = resolve(path)
    view = getattr(match.func, "cls", None) or getattr(match.func, "view_class", None)
    if IsPerson in getattr(view, "permission_classes", ()):
        return None, True, True
    actions = getattr(match.func, "actions", None) or {}
    team_actions = getattr(view, "team_actions", None)
    if team_actions is None:
        return None, False, False
    action = team_actions.get(actions.get(op.method.lower()))
    return action, action is not None, False


class Walk:
    def __init__(self, a: World, b: World, ghost: World):
        self.a, self.b, self.ghost = a, b, ghost
        self.base = snapshot()
        self.celery_endpoints = set(Endpoint.objects.filter(handler=Endpoint.Handler.CELERY_QUEUE)
                                    .values_list("pk", flat=True))
        self.endpoint_team = dict(Endpoint.objects.values_list("pk", "team_id"))
        self.message_team = {str(pk): self.endpoint_team[e] for pk, e in
                             ScheduledMessage.objects.values_list("pk", "endpoint_id")}
        self.b_identifiers = b.identifiers()
        self.user_team = {user: w.team_id for w in (a, b) for user in w.user_ids}
        self.violations: dict[tuple[str, str, str], list[str]] = {}
        self.action = None  # the Action the operation being walked declares
        self.personal = False  # whether its view is a person's own (IsPerson)
        self.calls = 0

    # one request
    def path(self, op: Operation, world: World, variant: tuple) -> str:
        path = op.path
        for (name, kind), chosen in zip(op.parameters(), variant):
            path = path.replace("{" + name + "}", str(world.objects[kind][chosen]))
        return path

    def request(self, op: Operation, world: World, variant: tuple) -> tuple[str, dict | None, dict]:
        body = body_of(*_resolve(op.body), world, op.operation_id) if op.body is not None else None
        return self.path(op, world, variant), body, query_of(op, world, variant)

    def call(self, op: Operation, world: World, variant: tuple, caller: str, client: APIClient) -> Call:
        path, body, query = self.request(op, world, variant)
        request = path + json.dumps(body) + json.dumps(query, default=str)
        saved = transaction.savepoint()
        try:
            if op.method == "GET":
                response = client.get(path, query)
            else:
                response = client.generic(op.method, path, json.dumps(body) if body is not None else "",
                                          content_type="application/json")
            found = changes(self.base, snapshot()) if op.write else []
        finally:
            transaction.savepoint_rollback(saved)
        self.calls += 1
        text = response.content.decode(errors="replace")
        return Call(op, world, variant, caller, response.status_code, text, request, found,
                    response.get("Cache-Control", ""))

    def flag(self, call: Call, case: str, why: str, caller: str | None = None) -> None:
        variant = ", ".join(call.variant)
        detail = f"{call.op.method} {self.path(call.op, call.world, call.variant)} by {call.caller}"
        self.violations.setdefault((call.op.operation_id, case, caller or call.caller), []).append(
            f"{why} [{variant or 'no object'}; {detail} -> {call.status}: {call.text[:160]}]")

    # what holds for every call by one of A's callers
    def check_always(self, call: Call, case: str) -> None:
        if call.status >= 500:
            self.flag(call, case, "a 5xx")
        if call.status >= 400 and call.found:
            self.flag(call, case, f"refused but changed rows: {', '.join(map(str, call.found))}")
        if 200 <= call.status < 300:
            leaked = sorted(i for i in self.b_identifiers if i in call.text and i not in call.request)
            if leaked:
                self.flag(call, case, f"the answer shows team B's {leaked}")
        theirs = [c for c in call.found if self.owner(c) in self.b.team_ids]
        if theirs:
            self.flag(call, case, f"changed team B's rows: {', '.join(map(str, theirs))}")
        self.check_leaks(call)

    def check_leaks(self, call: Call) -> None:
        """Secrets: an answer that carries one is not cacheable; the audit log and a viewer never
        see a webhook URL's query string (the world's targets carry a token there)."""
        secret = 200 <= call.status < 300 and CARRIES_SECRET.search(call.text)
        if secret and "no-store" not in call.cache_control:
            self.flag(call, "leak", f"an answer that carries a key or secret is cacheable "
                                    f"(Cache-Control: {call.cache_control!r})", caller="any")
        tokens = [w.refs["url_token"] for w in (self.a, self.b) if w.refs["url_token"] in call.text]
        if tokens and self.action is Action.AUDIT:
            self.flag(call, "leak", "the audit log shows a webhook URL's query string", caller="any")
        if tokens and call.caller == "viewer's key":
            self.flag(call, "leak", "a viewer sees a webhook URL's query string")

    def owner(self, change: Change) -> int | None:
        row = change.row
        if _model(change) == "Team":
            return row["id"]
        if row.get("team_id") is not None:
            return row["team_id"]
        if row.get("endpoint_id") is not None:
            return self.endpoint_team.get(row["endpoint_id"])
        if row.get("message_id") is not None:
            return self.message_team.get(str(row["message_id"]))
        if row.get("user_id") is not None:  # a person's own key
            return self.user_team.get(row["user_id"])
        return None

    def run(self) -> None:
        for op in OPERATIONS:
            if any(kind is None for _, kind in op.parameters()):
                self.violations.setdefault((op.operation_id, "walk", "-"), []).append(
                    f"{op.label}: a path parameter the walker cannot fill (add it to PATH_KINDS and World)")
                continue
            self.walk(op)

    def walk(self, op: Operation) -> None:
        kinds = [kind for _, kind in op.parameters()]
        variants = list(itertools.product(*(sorted(self.a.objects[kind]) for kind in kinds)))
        if query_of(op, self.a) != query_of(op, self.a, (BARE,)):
            variants += [(*variant, BARE) for variant in variants]
        sample = self.path(op, self.a, variants[0])
        action, has_action, self.personal = declared(op, sample)
        self.action = action
        if op.write and not has_action:
            self.violations.setdefault((op.operation_id, "walk", "-"), []).append(
                f"{op.label}: a write whose view declares no teams.roles.Action "
                f"(TeamPermissions lets anyone)")
        ghosts = {caller: self.call(op, self.ghost, variants[0], caller, self.a.clients[caller])
                  for caller in ("all-scope key", "admin's key")}
        succeeded = []
        for variant in variants:
            full = self.call(op, self.a, variant, "all-scope key", self.a.clients["all-scope key"])
            if full.status == 403:
                full = self.call(op, self.a, variant, "admin's key", self.a.clients["admin's key"])
            self.check_always(full, "full")
            if 200 <= full.status < 300:
                succeeded.append(full)
            self.case_a(op, variant, ghosts)
            self.case_b(op, variant, action)
            self.case_c(op, variant, action)
        if not succeeded:
            self.violations.setdefault((op.operation_id, "calibration", "-"), []).append(
                f"{op.label}: no call with full rights on A's own objects succeeded, so its refusals prove "
                f"nothing (give BODY_VALUES a value, or World a variant): {full.status} {full.text[:300]}")
        for call in succeeded:
            needs = scopes_needed(call.found, self.celery_endpoints)
            unclassified = [n for n in needs if n.startswith("unclassified")]
            if unclassified:
                self.flag(call, "calibration", "; ".join(unclassified))

    def case_a(self, op: Operation, variant: tuple, ghosts: dict) -> None:
        """B's object in the path (with B's names in the body), then A's object in the path with
        B's names in the body or query (an endpoint, a team, a user, a task id)."""
        names_object = bool(op.parameters())
        theirs = replace(self.a, label="a, naming b's", refs=self.b.refs)
        nobody = replace(self.a, label="a, naming nothing", refs=self.ghost.refs)
        mixed = self.request(op, theirs, variant) != self.request(op, self.a, variant)
        for caller, ghost in ghosts.items():
            client = self.a.clients[caller]
            if names_object:
                call = self.call(op, self.b, variant, caller, client)
                self.check_always(call, "a")
                if 200 <= call.status < 300:
                    self.flag(call, "a", "a 2xx on team B's object")
                elif call.status != ghost.status:
                    self.flag(call, "a", f"answers team B's object unlike one that does not exist "
                                         f"({ghost.status})")
            if len(op.parameters()) > 1:  # A's team in the path, B's object under it
                last = op.parameters()[-1][1]
                nested = replace(self.a, label="a, b's under it",
                                 objects={**self.a.objects, last: self.b.objects[last]})
                none = replace(self.a, label="a, nothing under it",
                               objects={**self.a.objects, last: self.ghost.objects[last]})
                call = self.call(op, nested, variant, caller, client)
                self.check_always(call, "a")
                unknown = self.call(op, none, variant, caller, client)
                if 200 <= call.status < 300:
                    self.flag(call, "a", "a 2xx on team B's object under A's")
                elif call.status != unknown.status:
                    self.flag(call, "a", f"answers team B's object under A's unlike one that does not exist "
                                         f"({unknown.status}: {unknown.text[:120]})")
            if mixed:
                call = self.call(op, theirs, variant, caller, client)
                self.check_always(call, "a")
                unknown = self.call(op, nobody, variant, caller, client)
                if call.status != unknown.status:
                    self.flag(call, "a", f"answers a name of team B's unlike one that does not exist "
                                         f"({unknown.status}: {unknown.text[:120]})")

    def case_b(self, op: Operation, variant: tuple, action) -> None:
        for scope in SCOPES:
            caller = f"key without {scope}"
            call = self.call(op, self.a, variant, caller, self.a.clients[caller])
            self.check_always(call, "b")
            if not 200 <= call.status < 300:
                continue
            if self.personal:
                self.flag(call, "b", "a team's key did what only a person may (a person's own view)")
            elif action is not None and action.scope is None:
                self.flag(call, "b", f"a team's key did what only a person may ({action.name})")
            elif action is not None and action.scope == scope:
                self.flag(call, "b", f"a 2xx without the {scope} scope its view declares ({action.name})")
            needs = scopes_needed(call.found, self.celery_endpoints)
            if scope in needs:
                self.flag(call, "b", f"a change that needs the {scope} scope: "
                                     f"{', '.join(map(str, call.found))}")
            if PERSON in needs:
                self.flag(call, "b", f"a team's key changed what only a person may: "
                                     f"{', '.join(map(str, call.found))}")

    def case_c(self, op: Operation, variant: tuple, action) -> None:
        """A viewer's key, and a member's: nothing beyond the person's role, by what the view
        declares or by what the change needs. On a person's own object (an invitation to A's admin,
        A's admin's key): another person of the team gets what a name of nothing gets (a 404)."""
        for role in (VIEWER, MEMBER):
            caller = f"{role}'s key"
            call = self.call(op, self.a, variant, caller, self.a.clients[caller])
            self.check_always(call, "c")
            if self.personal and op.parameters():
                ghost = self.call(op, self.ghost, variant, caller, self.a.clients[caller])
                if call.status != ghost.status or 200 <= call.status < 300:
                    self.flag(call, "c", f"answers another person's object unlike one that does not exist "
                                         f"({ghost.status}: {ghost.text[:120]})")
                    continue
            if not 200 <= call.status < 300:
                continue
            if role == VIEWER and op.write:
                self.flag(call, "c", "a viewer's write succeeded")
            elif action is not None and RANK[action.role] > RANK[role]:
                self.flag(call, "c", f"a {role} did what needs the {action.role} role ({action.name})")
            needs = scopes_needed(call.found, self.celery_endpoints)
            above = sorted(need for need in needs if RANK[ROLE_OF_NEED.get(need, ADMIN)] > RANK[role])
            if above:
                self.flag(call, "c", f"a {role} made a change that needs {above}: "
                                     f"{', '.join(map(str, call.found))}")


# --- the tests ------------------------------------------------------------------------------------


def test_the_walker_fills_every_path_parameter_of_the_schema():
    """A route whose parameter names an object the walker does not know would be skipped: fail."""
    missing = unfillable()
    assert not missing, ("the cross-team walker cannot fill these path parameters, so it cannot walk their "
                         "routes; add each (collection, parameter) to PATH_KINDS and an object of the kind "
                         "to build_world and ghost_world:\n" + "\n".join(missing))
    assert len(OPERATIONS) >= 30, [op.label for op in OPERATIONS]


@pytest.fixture
def worlds(platform):
    return build_world("a"), build_world("b"), ghost_world()


@pytest.mark.django_db
@pytest.mark.broker
def test_every_operation_keeps_to_its_team_and_its_scopes(worlds):
    walk = Walk(*worlds)
    walk.run()
    found = {key: reasons for key, reasons in walk.violations.items() if key not in KNOWN_HOLES}
    stale = sorted(key for key in KNOWN_HOLES if key not in walk.violations)
    known = {key: reasons for key, reasons in walk.violations.items() if key in KNOWN_HOLES}
    report = [f"{op} | case {case} | {caller}:\n    " + "\n    ".join(reasons[:3])
              + (f"\n    (and {len(reasons) - 3} more calls)" if len(reasons) > 3 else "")
              for (op, case, caller), reasons in sorted(found.items())]
    print(f"\n{walk.calls} calls over {len(OPERATIONS)} operations; known holes still open: "
          f"{sorted(known)}")
    assert not found and not stale, (
        f"{len(found)} violation(s) of the fence in {walk.calls} calls:\n" + "\n".join(report)
        + (f"\nKNOWN_HOLES entries that no longer show (remove them): {stale}" if stale else ""))
