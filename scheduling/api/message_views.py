"""Thin views of scheduled messages (/api/messages/): parse, call one service, format. Schedule,
watch, reschedule, cancel, republish, resend; bulk actions by filter; the Celery task routes
of workers of other codebases (claim, ended, cancel-task)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from scheduling.api.headers import TRACEPARENT_PARAMETER, traced
from scheduling.api.pagination import AttemptCursorPagination, MessageCursorPagination
from scheduling.api.renderers import FastJSONRenderer
from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.api.serializers import (
    BulkCreateSerializer,
    BulkJobSerializer,
    CountSerializer,
    DryRunCountSerializer,
    MessageAttemptSerializer,
    MessageCreatedSerializer,
    MessageCreateSerializer,
    MessageFilterSerializer,
    MessageMatchSerializer,
    MessageRescheduleSerializer,
    MessageSerializer,
    StatusSerializer,
    TaskCancelSerializer,
    TaskClaimedSerializer,
    TaskClaimSerializer,
    TaskEndAnswerSerializer,
    TaskEndedSerializer,
    message_item,
)
from scheduling.celery.services import celery_task_cancel, celery_task_claim_message, celery_task_end
from scheduling.core.errors import BulkValidationError, NotFound
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.endpoints.selectors import endpoint_get_one
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
from scheduling.teams.selectors import queryset_for_caller, team_pick


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
            (result,) = message_schedule_many(items=traced([serializer.to_item()], request), caller=self.caller)
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
        results = message_schedule_many(items=traced(items, request), caller=self.caller)
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
