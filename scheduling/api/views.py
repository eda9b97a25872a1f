"""Thin API views: parse, call one service, format. Every read starts from the caller's teams
(queryset_for_caller) and every service is told who calls (core/caller.py)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from scheduling.api.callers import request_caller
from scheduling.api.pagination import AttemptCursorPagination, MessageCursorPagination
from scheduling.api.permissions import TeamPermissions
from scheduling.api.renderers import FastJSONRenderer
from scheduling.api.serializers import (
    BulkCreateSerializer,
    BulkJobSerializer,
    CountSerializer,
    DryRunCountSerializer,
    EndpointCreatedSerializer,
    EndpointSerializer,
    EndpointUpdateSerializer,
    MessageAttemptSerializer,
    MessageCreatedSerializer,
    MessageCreateSerializer,
    MessageFilterSerializer,
    MessageMatchSerializer,
    MessageRescheduleSerializer,
    MessageSerializer,
    RotateSecretSerializer,
    RunsSerializer,
    SchedulePreviewSerializer,
    ScheduleSerializer,
    ScheduleWriteSerializer,
    SecretRotatedSerializer,
    StatusSerializer,
    TaskCancelSerializer,
    TaskClaimedSerializer,
    TaskClaimSerializer,
    TaskEndAnswerSerializer,
    TaskEndedSerializer,
    message_item,
)
from scheduling.celery.services import celery_task_cancel, celery_task_claim_message, celery_task_end
from scheduling.core import schedule_rules as rules
from scheduling.core.errors import BulkValidationError, NotFound
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.core.text import has_nul
from scheduling.endpoints.selectors import endpoint_count_messages, endpoint_get_one, endpoint_list
from scheduling.endpoints.services import (
    endpoint_create,
    endpoint_enable,
    endpoint_rotate_secret,
    endpoint_set_active,
    endpoint_update,
)
from scheduling.messages.bulk import (
    DRY_RUN_COUNT_CAP,
    message_count_matching,
    message_enqueue_matching,
    message_start_matching,
)
from scheduling.messages.selectors import (
    message_describe_gone,
    message_list,
    message_list_attempts,
    message_list_groups,
)
from scheduling.messages.services import (
    message_cancel,
    message_republish,
    message_reschedule,
    message_resend,
    message_schedule_many,
)
from scheduling.models import BulkAction, Endpoint
from scheduling.schedules.selectors import schedule_list
from scheduling.schedules.services import (
    schedule_check_rule,
    schedule_delete,
    schedule_set_paused,
    schedule_upsert,
)
from scheduling.teams.selectors import queryset_for_caller, team_pick

# W3C Trace Context (docs/observability/tracing.md): the message continues the caller's trace. An
# invalid value is ignored, as W3C says (the message starts a trace of its own); never a 400.
TRACEPARENT_PARAMETER = OpenApiParameter(
    "traceparent", str, location=OpenApiParameter.HEADER, required=False,
    description="W3C traceparent (00-<trace id>-<parent id>-<flags>) the message continues; kept with it and "
                "sent on to its webhook or Celery task; ignored unless valid")


def _traced(items: list[dict], request) -> list[dict]:
    """The request's traceparent on each item (the service keeps it only if it is valid)."""
    value = request.headers.get("traceparent")
    if value:
        for item in items:
            item["traceparent"] = value
    return items


TEAM_PARAMETER = OpenApiParameter("team", str, description="one of your teams: needed where a name is used by "
                                                           "several of them")


def no_store(response):
    """An answer that carries a key or a secret: ``Cache-Control: no-store`` (and Django's other
    never-cache headers), so no cache -- a browser's, a proxy's -- keeps a copy."""
    add_never_cache_headers(response)
    return response


class TeamScoped:
    """What every view of team data shares: its caller, reads narrowed to the caller's teams,
    and a name looked up among them (``?team=`` says which team's, where several use it)."""

    permission_classes = [IsAuthenticated, TeamPermissions]
    team_actions: dict = {}

    @property
    def caller(self):
        return request_caller(self.request)

    def scoped(self, queryset, action=Action.READ):
        """Rows of the teams where the caller may read, or do what this request does (a key with
        the schedules scope alone still addresses its team's schedules)."""
        also = self.team_actions.get(getattr(self, "action", None))
        queryset = queryset_for_caller(queryset=queryset, caller=self.caller, action=action, also=also)
        team = self.request.query_params.get("team")
        if team:
            queryset = queryset.filter(**{self.team_name_field: team}) if not has_nul(team) else queryset.none()
        return queryset

    team_name_field = "team__name"

    @staticmethod
    def team_id_of(obj) -> int:
        return obj.team_id

    def acting_team_ids(self) -> set[int]:
        """The team(s) of the object this detail route names, among the caller's: what the team
        rate charges before the handler runs (throttles.py; a person in several teams). Empty
        when none is found (the handler answers 404 or 400 then)."""
        value = self.kwargs.get(self.lookup_url_kwarg or self.lookup_field)
        if value is None or has_nul(str(value)):
            return set()
        try:
            return {self.team_id_of(row) for row in self.get_queryset().filter(**{self.lookup_field: value})[:2]}
        except (DjangoValidationError, ValueError):
            return set()

    def get_object(self):
        """The caller's object of this name: 404 when none of its teams has one, 400 when several
        do and ``?team=`` does not say which."""
        queryset = self.filter_queryset(self.get_queryset())
        value = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        found = list(queryset.filter(**{self.lookup_field: value})[:2])
        if not found:
            raise Http404
        if len(found) > 1:
            raise DjangoValidationError({"team": f"several of your teams have {value!r}: give ?team="})
        self.check_object_permissions(self.request, found[0])
        return found[0]


class EndpointViewSet(
    TeamScoped, mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    http_method_names = ["get", "post", "patch", "head", "options"]
    """Destinations of delayed messages. Creating one binds its queue on the broker."""

    serializer_class = EndpointSerializer
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "create": Action.ENDPOINTS,
                    "partial_update": Action.ENDPOINTS, "activate": Action.ENDPOINTS, "deactivate": Action.ENDPOINTS,
                    "rotate_secret": Action.ENDPOINTS}
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"  # dotted names (v3) too

    def get_queryset(self):
        return self.scoped(endpoint_list().select_related("team", "health"))

    @extend_schema(parameters=[TEAM_PARAMETER])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "message_counts": getattr(self, "message_counts", {})}

    def paginate_queryset(self, queryset):
        """The page's endpoints, then their message counts in one go (capped, then estimated)."""
        page = super().paginate_queryset(queryset)
        self.message_counts = endpoint_count_messages(endpoint_ids=[e.pk for e in page or ()])
        return page

    def get_object(self):
        endpoint = super().get_object()
        self.message_counts = endpoint_count_messages(endpoint_ids=[endpoint.pk])
        return endpoint

    @extend_schema(responses={201: EndpointCreatedSerializer})
    def create(self, request, *args, **kwargs):
        """Create and bind an endpoint. A webhook endpoint's signing secret is in this answer,
        once: reads never show it (rotate-secret gives a new one)."""
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        team = team_pick(caller=self.caller, action=Action.ENDPOINTS, name=(data.pop("team", None) or {}).get("name"))
        if data.get("queue") and not self.caller.operator:
            raise DjangoValidationError({"queue": "only platform operators bind an endpoint to an exact queue; "
                                                  "leave it out for <team>--<name>"})
        endpoint = endpoint_create(team=team, **data)
        data = self.get_serializer(endpoint).data
        if endpoint.handler == Endpoint.Handler.WEBHOOK:
            data = {**data, "webhook_secret": endpoint.new_webhook_secret}  # the plaintext, this once
        return no_store(Response(data, status=status.HTTP_201_CREATED))

    @extend_schema(request=EndpointUpdateSerializer, responses={200: EndpointCreatedSerializer})
    def partial_update(self, request, name=None):
        """Change the version or delivery mode of new messages (scheduled ones keep theirs), its
        handler (to or from celery_queue only with no message in flight: a 400 on ``handler``
        naming how many are; one that becomes a webhook answers its new secret, once), the
        endpoint's flow control (max_deliveries_per_second, max_concurrent; null: no limit) or its
        webhook deadline; is_active true enables it (one the platform disabled resumes), false
        pauses it."""
        changes = EndpointUpdateSerializer(data=request.data, partial=True)
        changes.is_valid(raise_exception=True)
        data = dict(changes.validated_data)
        active = data.pop("is_active", None)
        endpoint = endpoint_update(endpoint=self.get_object(), **data)
        secret = endpoint.new_webhook_secret  # made now: an endpoint that became a webhook one
        if active is not None:
            endpoint = (endpoint_enable(endpoint=endpoint) if active
                        else endpoint_set_active(endpoint=endpoint, active=False))
        answer = self.get_serializer(endpoint).data
        return Response({**answer, "webhook_secret": secret} if secret else answer)  # the plaintext, this once

    @extend_schema(request=None, responses={200: EndpointSerializer})
    @action(detail=True, methods=["post"])
    def activate(self, request, name=None):
        """Re-bind the queue and resume delivery (an endpoint the platform disabled: enabled, its
        health reset)."""
        endpoint = endpoint_set_active(endpoint=self.get_object(), active=True)
        return Response(self.get_serializer(endpoint).data)

    @extend_schema(request=None, responses={200: EndpointSerializer})
    @action(detail=True, methods=["post"])
    def deactivate(self, request, name=None):
        """Pause delivery (messages wait in the queue) and refuse new messages."""
        endpoint = endpoint_set_active(endpoint=self.get_object(), active=False)
        return Response(self.get_serializer(endpoint).data)

    @extend_schema(request=RotateSecretSerializer, responses={200: SecretRotatedSerializer})
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, name=None):
        """A new webhook signing secret, answered once; the current one keeps signing beside it
        for previous_valid_seconds (default a day), so receivers switch without a gap."""
        changes = RotateSecretSerializer(data=request.data)
        changes.is_valid(raise_exception=True)
        endpoint = endpoint_rotate_secret(endpoint=self.get_object(), **changes.validated_data)
        return no_store(Response({"name": endpoint.name, "webhook_secret": endpoint.new_webhook_secret,
                                  "previous_valid_until": endpoint.webhook_secret_previous_expires_at}))


class MessageViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Scheduled messages: schedule (one or up to 1,000), watch, reschedule, cancel, republish,
    resend, and their attempts."""

    http_method_names = ["get", "post", "patch", "head", "options"]
    serializer_class = MessageSerializer
    # creating checks each message's endpoint in the service (its team), Celery tasks the tasks right
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "create": Action.SCHEDULE,
                    "bulk": Action.SCHEDULE, "partial_update": Action.SCHEDULE, "cancel": Action.CANCEL,
                    "republish": Action.CANCEL, "resend": Action.CANCEL, "attempts": Action.READ,
                    "cancel_matching": Action.CANCEL, "republish_matching": Action.CANCEL,
                    "claim": Action.TASKS, "ended": Action.TASKS, "cancel_task": Action.CANCEL}

    @staticmethod
    def team_id_of(obj) -> int:
        return obj.endpoint.team_id

    def acting_team_ids(self) -> set[int]:
        try:
            rows = queryset_for_caller(queryset=message_list(), caller=self.caller).filter(pk=self.kwargs.get("pk"))
            return set(rows.values_list("endpoint__team_id", flat=True)[:1])
        except (DjangoValidationError, ValueError):
            return set()

    def get_object(self):
        """A 404 that says where a finished message goes after its retention (or, for another
        team's message, exactly what it says for one that does not exist)."""
        queryset = queryset_for_caller(queryset=message_list(), caller=self.caller)
        try:
            message = queryset.filter(pk=self.kwargs.get(self.lookup_field)).first()
        except (DjangoValidationError, ValueError):
            message = None
        if message is None:
            raise NotFound(message_describe_gone(message_id=self.kwargs.get(self.lookup_field)))
        self.check_object_permissions(self.request, message)
        return message

    pagination_class = MessageCursorPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: the model is enough
            return message_list().none()
        filters = MessageFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        self.filters = dict(filters.validated_data)
        team_ids = self.caller.team_ids(Action.READ)
        team = self.filters.pop("team", None)
        if team:
            team_ids = [team_pick(caller=self.caller, action=Action.READ, name=team).pk]
        self.team_ids = team_ids
        endpoint_id = None
        if self.filters.get("endpoint"):
            named = endpoint_get_one(name=self.filters["endpoint"], team_ids=team_ids)
            endpoint_id = named.pk if named else -1
        return message_list(endpoint_id=endpoint_id, status=self.filters.get("status"),
                            schedule=self.filters.get("schedule"), team_ids=team_ids)

    def list_groups(self) -> list[dict]:
        """The index ranges the list merges: one per status and version of the endpoint asked,
        or one per status (the pagination reads each no further than a page), or per endpoint
        of the caller's teams while they are few."""
        return message_list_groups(fixed={name for name in ("endpoint", "status", "schedule") if self.filters.get(name)},
                                   team_ids=self.team_ids)

    @extend_schema(
        parameters=[
            TEAM_PARAMETER,
            OpenApiParameter("endpoint", str, description="endpoint name"),
            OpenApiParameter("status", str, enum=[s.value for s in Status]),
            OpenApiParameter("schedule", str, description="a recurring schedule's key: its runs"),
        ]
    )
    def list(self, request, *args, **kwargs):
        """Newest first (created_at, then id), 50 a page: follow ``next`` (a cursor) for older
        ones. No total count: counting a history of millions of rows cost more than the page."""
        return super().list(request, *args, **kwargs)

    @extend_schema(request=MessageCreateSerializer, responses={201: MessageSerializer, 200: MessageSerializer},
                   parameters=[TRACEPARENT_PARAMETER])
    def create(self, request):
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            (result,) = message_schedule_many(items=_traced([serializer.to_item()], request), caller=self.caller)
        except BulkValidationError as exc:
            raise DjangoValidationError(exc.errors[0]) from None
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(MessageSerializer(result.message).data, status=code)

    @extend_schema(request=MessageRescheduleSerializer, responses={200: MessageSerializer})
    def partial_update(self, request, pk=None):
        """Reschedule a pending or published message: delivered once, at the new time, with the same
        id (its earlier due times are in due_history); 409 once delivered, cancelled or failed."""
        changes = MessageRescheduleSerializer(data=request.data)
        changes.is_valid(raise_exception=True)
        message = message_reschedule(message_id=pk, delay=changes.validated_data.get("delay_seconds"),
                                     deliver_at=changes.validated_data.get("deliver_at"), caller=self.caller)
        return Response(MessageSerializer(message).data)

    @extend_schema(request=BulkCreateSerializer, responses={201: inline_serializer(
        "BulkCreated", {"messages": MessageCreatedSerializer(many=True)})}, parameters=[TRACEPARENT_PARAMETER])
    @action(detail=False, methods=["post"], renderer_classes=[FastJSONRenderer])
    def bulk(self, request):
        serializer = BulkCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        items = [message_item(data) for data in serializer.validated_data["messages"]]
        results = message_schedule_many(items=_traced(items, request), caller=self.caller)
        return Response(
            {"messages": [MessageCreatedSerializer.represent(r.message) for r in results]},
            status=status.HTTP_201_CREATED,
        )

    def _bulk(self, request, kind: str) -> Response:
        """A dry run's count (capped), or the action recorded and handed to a worker: 202 with the
        job and its status URL (Location), as the admin's "all matching" actions do."""
        query = MessageMatchSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        filters = {k: v for k, v in query.validated_data.items() if k not in ("dry_run", "team")}
        name = query.validated_data.get("team")
        # one team, or (an operator naming none) every team
        team = None if self.caller.operator and not name else team_pick(caller=self.caller, action=Action.CANCEL,
                                                                         name=name)
        if query.validated_data["dry_run"]:
            count = message_count_matching(kind=kind, filters=filters, team=team, cap=DRY_RUN_COUNT_CAP)
            return Response({"count": min(int(count), DRY_RUN_COUNT_CAP), "exact": count.exact})
        job = message_start_matching(kind=kind, filters=filters, requested_by=self.caller.name, team=team)
        message_enqueue_matching(action=job)
        data = BulkJobSerializer(job, context={"request": request}).data
        return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": data["status_url"]})

    @extend_schema(request=MessageMatchSerializer, responses={202: BulkJobSerializer, 200: DryRunCountSerializer},
                   operation_id="messages_cancel_matching")
    @action(detail=False, methods=["post"], url_path="cancel")
    def cancel_matching(self, request):
        """Cancel every pending or published message matching the filters: a job a worker runs in
        batches (202; follow status_url, GET /api/bulk-actions/<id>/, until its state is done or
        failed); or count them (dry_run: 200, exact up to 10,000)."""
        return self._bulk(request, "cancel")

    @extend_schema(request=MessageMatchSerializer, responses={202: BulkJobSerializer, 200: DryRunCountSerializer},
                   operation_id="messages_republish_matching")
    @action(detail=False, methods=["post"], url_path="republish")
    def republish_matching(self, request):
        """Republish every failed message matching the filters: a job, as cancel's (202 and its
        status_url); or count them (dry_run)."""
        return self._bulk(request, "republish")

    @extend_schema(request=TaskClaimSerializer, responses={200: TaskClaimedSerializer}, operation_id="messages_claim")
    @action(detail=True, methods=["post"])
    def claim(self, request, pk=None):
        """A worker of another codebase about to run a Celery task that came out of the cascade
        (its message's header x-dp-message-id): the hand-over is recorded (delivered), and ``run``
        says whether to run it: false for a cancelled task or a second hand-over of one already
        delivered; a redelivery after a worker died runs again. 409 for a message that is not a
        Celery task (its endpoint is not celery_queue)."""
        body = TaskClaimSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        claim = celery_task_claim_message(message_id=pk, redelivered=body.validated_data["redelivered"],
                                          by=body.validated_data.get("worker", ""), caller=self.caller)
        return Response({"id": claim.message.id, "status": claim.message.status, "run": claim.run,
                         "ordered": claim.ordered is not None})

    @extend_schema(request=TaskEndedSerializer, responses={200: TaskEndAnswerSerializer}, operation_id="messages_ended")
    @action(detail=True, methods=["post"])
    def ended(self, request, pk=None):
        """A worker of another codebase reports that a task it claimed ended (the claim answered
        ordered: true): its ordering key's turn ends and the next message of the key is woken;
        ``retrying`` keeps the key for the retry. A message that holds no turn changes nothing
        (turn: none). 409 for a message that is not a Celery task."""
        body = TaskEndedSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message, turn = celery_task_end(message_id=pk, retrying=body.validated_data["retrying"], caller=self.caller)
        return Response({"id": message.id, "turn": turn})

    @extend_schema(request=TaskCancelSerializer, responses={200: CountSerializer}, operation_id="messages_cancel_task")
    @action(detail=False, methods=["post"], url_path="cancel-task")
    def cancel_task(self, request):
        """Cancel every waiting run of a Celery task id (its first run and its delayed retries) in
        your teams, durably (unlike Celery's revoke): ``count``, how many were cancelled."""
        body = TaskCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        count = celery_task_cancel(task_id=body.validated_data["task_id"], endpoint=body.validated_data.get("endpoint"),
                                   team=body.validated_data.get("team"), caller=self.caller)
        return Response({"count": count})

    @extend_schema(request=None, responses={200: StatusSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        message = message_cancel(message_id=pk, caller=self.caller)
        return Response({"id": message.id, "status": message.status})

    @extend_schema(request=None, responses={200: StatusSerializer})
    @action(detail=True, methods=["post"])
    def republish(self, request, pk=None):
        message = message_republish(message_id=pk, caller=self.caller)
        return Response({"id": message.id, "status": message.status})

    @extend_schema(request=None, responses={200: StatusSerializer})
    @action(detail=True, methods=["post"])
    def resend(self, request, pk=None):
        """Send a delivered (or failed) message again, at once: a new attempt whose trigger is
        ``manual`` (its earlier attempts stay listed). 409 while it is pending or published, once
        cancelled, for a Celery task, and while a webhook call of it is in flight."""
        message = message_resend(message_id=pk, caller=self.caller)
        return Response({"id": message.id, "status": message.status})

    @extend_schema(responses={200: MessageAttemptSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=AttemptCursorPagination,
            serializer_class=MessageAttemptSerializer)
    def attempts(self, request, pk=None):
        """The message's handler attempts (each webhook call: when, how long, its outcome and HTTP
        status, the start of the answer, the worker, and why it was made), oldest first, 100 a page
        by cursor. Kept as long as the message; archived with it."""
        message = self.get_object()
        page = self.paginate_queryset(message_list_attempts(message_id=message.pk))
        return self.get_paginated_response(MessageAttemptSerializer(page, many=True).data)


class ScheduleViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Recurring schedules: each run is a scheduled message, made ahead of its time (its runs:
    ``GET /api/messages/?schedule=<key>``)."""

    serializer_class = ScheduleSerializer
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "create": Action.SCHEDULES,
                    "destroy": Action.SCHEDULES, "pause": Action.SCHEDULES, "resume": Action.SCHEDULES}
    http_method_names = ["get", "post", "delete", "head", "options"]
    lookup_field = "key"
    lookup_value_regex = r"[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*"

    def get_queryset(self):
        return self.scoped(schedule_list().select_related("team"))

    @extend_schema(parameters=[TEAM_PARAMETER])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=ScheduleWriteSerializer, responses={201: ScheduleSerializer, 200: ScheduleSerializer})
    def create(self, request):
        """Create the schedule ``key``, or update it (upsert): 201 when created, 200 when updated.
        A change to its rule, payload or endpoint cancels its runs to come and makes them again."""
        serializer = ScheduleWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        arguments = serializer.to_service()
        team = team_pick(caller=self.caller, action=Action.SCHEDULES, name=arguments.pop("team_name"))
        schedule, created = schedule_upsert(team=team, **arguments)
        return Response(ScheduleSerializer(schedule).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None})
    def destroy(self, request, key=None):
        """Delete the schedule and cancel its runs to come; its past runs stay listed by its key."""
        schedule = self.get_object()
        schedule_delete(key=schedule.key, team=schedule.team)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ScheduleSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request, key=None):
        """No more runs; the runs already made are cancelled."""
        schedule = self.get_object()
        return Response(ScheduleSerializer(schedule_set_paused(key=schedule.key, team=schedule.team, paused=True)).data)

    @extend_schema(request=None, responses={200: ScheduleSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, key=None):
        """Runs again from now on (runs that fell while paused are not made up)."""
        schedule = self.get_object()
        return Response(ScheduleSerializer(schedule_set_paused(key=schedule.key, team=schedule.team,
                                                               paused=False)).data)

    @extend_schema(parameters=[SchedulePreviewSerializer], responses={200: RunsSerializer})
    @action(detail=False, methods=["get"])
    def preview(self, request):
        """The next ``count`` run times (UTC) of a cron rule in a timezone, or of an interval."""
        query = SchedulePreviewSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        after = data.get("after") or timezone.now()
        rule = schedule_check_rule(cron=data.get("cron", ""), timezone_name=data.get("timezone", "UTC"),
                             interval_seconds=data.get("interval_seconds"), start_at=data.get("start_at") or after)
        runs = rules.preview(rule, after=after, count=data["count"])
        return Response({"runs": [run.isoformat().replace("+00:00", "Z") for run in runs]})


class BulkActionViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Bulk cancels and republishes by filter (the API's and the admin's), newest first: a job's
    status_url is its page here; ``done`` grows as its batches commit, ``state`` ends done or
    failed. Only the teams the caller reads (an operator's every-team job: operators only)."""

    serializer_class = BulkJobSerializer
    team_actions = {"list": Action.READ, "retrieve": Action.READ}

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: the model is enough
            return BulkAction.objects.none()
        return self.scoped(BulkAction.objects.select_related("team").order_by("-created_at", "-id"))

    def acting_team_ids(self) -> set[int]:
        return super().acting_team_ids() if _bigint(self.kwargs.get("pk")) else set()

    @extend_schema(parameters=[TEAM_PARAMETER])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    def get_object(self):
        found = self.get_queryset().filter(pk=self.kwargs["pk"]).first() if _bigint(self.kwargs["pk"]) else None
        if found is None:
            raise Http404
        self.check_object_permissions(self.request, found)
        return found


def _bigint(value) -> bool:
    """An id PostgreSQL's bigint holds (anything else: no such row, not a database error)."""
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18
