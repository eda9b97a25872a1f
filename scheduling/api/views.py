"""Thin API views: parse, call one service, format."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from ..errors import BulkValidationError, NotFound
from ..lifecycle import Status
from ..models import Endpoint
from ..schedules import rules
from ..selectors.database import (
    endpoint_count_messages,
    endpoint_list,
    message_list,
    message_list_groups,
    schedule_list,
)
from ..services.endpoints import endpoint_create, endpoint_rotate_secret, endpoint_set_active, endpoint_update
from ..services.bulk_actions import message_bulk_matching
from ..services.messages import message_cancel, message_republish, message_reschedule, message_schedule_many
from ..services.retention import message_describe_gone
from ..services.schedules import schedule_check_rule, schedule_delete, schedule_set_paused, schedule_upsert
from .pagination import MessageCursorPagination
from .permissions import ModelPermissions
from .renderers import FastJSONRenderer
from .serializers import (
    BulkCreateSerializer,
    EndpointCreatedSerializer,
    EndpointSerializer,
    EndpointUpdateSerializer,
    MessageCreatedSerializer,
    MessageCreateSerializer,
    CountSerializer,
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
    message_item,
)


class EndpointViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    http_method_names = ["get", "post", "patch", "head", "options"]
    """Destinations of delayed messages. Creating one binds its queue on the broker."""

    serializer_class = EndpointSerializer
    permission_classes = [ModelPermissions]
    action_permissions = {
        "activate": ["scheduling.change_endpoint"],
        "deactivate": ["scheduling.change_endpoint"],
        "rotate_secret": ["scheduling.change_endpoint"],
    }
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*"  # dotted names (v3) too

    def get_queryset(self):
        return endpoint_list()

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
        endpoint = endpoint_create(**serializer.validated_data)
        data = self.get_serializer(endpoint).data
        if endpoint.handler == Endpoint.Handler.WEBHOOK:
            data = {**data, "webhook_secret": endpoint.webhook_secret}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=EndpointUpdateSerializer, responses={200: EndpointSerializer})
    def partial_update(self, request, name=None):
        """Change the version or delivery mode of new messages (scheduled ones keep theirs), or the
        endpoint's flow control (max_deliveries_per_second, max_concurrent; null: no limit)."""
        changes = EndpointUpdateSerializer(data=request.data, partial=True)
        changes.is_valid(raise_exception=True)
        endpoint = endpoint_update(endpoint=self.get_object(), **changes.validated_data)
        return Response(self.get_serializer(endpoint).data)

    @extend_schema(request=None, responses={200: EndpointSerializer})
    @action(detail=True, methods=["post"])
    def activate(self, request, name=None):
        """Re-bind the queue and resume delivery."""
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
        return Response({"name": endpoint.name, "webhook_secret": endpoint.webhook_secret,
                         "previous_valid_until": endpoint.webhook_secret_previous_expires_at})


class MessageViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Scheduled messages: schedule (one or up to 1,000), watch, reschedule, cancel, republish."""

    http_method_names = ["get", "post", "patch", "head", "options"]
    serializer_class = MessageSerializer
    permission_classes = [ModelPermissions]
    action_permissions = {
        "cancel": ["scheduling.cancel_scheduledmessage"],
        "republish": ["scheduling.republish_scheduledmessage"],
        "cancel_matching": ["scheduling.cancel_scheduledmessage"],
        "republish_matching": ["scheduling.republish_scheduledmessage"],
    }

    def get_object(self):
        """A 404 that says where a finished message goes after its retention."""
        try:
            return super().get_object()
        except Http404:
            raise NotFound(message_describe_gone(message_id=self.kwargs.get(self.lookup_field))) from None

    pagination_class = MessageCursorPagination

    def get_queryset(self):
        filters = MessageFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        self.filters = filters.validated_data
        return message_list(**self.filters)

    def list_groups(self) -> list[dict]:
        """The index ranges the list merges: one per status and version of the endpoint asked,
        or one per status (the pagination reads each no further than a page)."""
        return message_list_groups(fixed={name for name in ("endpoint", "status", "schedule") if self.filters.get(name)})

    @extend_schema(
        parameters=[
            OpenApiParameter("endpoint", str, description="endpoint name"),
            OpenApiParameter("status", str, enum=[s.value for s in Status]),
            OpenApiParameter("schedule", str, description="a recurring schedule's key: its runs"),
        ]
    )
    def list(self, request, *args, **kwargs):
        """Newest first (created_at, then id), 50 a page: follow ``next`` (a cursor) for older
        ones. No total count: counting a history of millions of rows cost more than the page."""
        return super().list(request, *args, **kwargs)

    @extend_schema(request=MessageCreateSerializer, responses={201: MessageSerializer, 200: MessageSerializer})
    def create(self, request):
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            (result,) = message_schedule_many(items=[serializer.to_item()])
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
                                     deliver_at=changes.validated_data.get("deliver_at"))
        return Response(MessageSerializer(message).data)

    @extend_schema(request=BulkCreateSerializer, responses={201: inline_serializer(
        "BulkCreated", {"messages": MessageCreatedSerializer(many=True)})})
    @action(detail=False, methods=["post"], renderer_classes=[FastJSONRenderer])
    def bulk(self, request):
        serializer = BulkCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        items = [message_item(data) for data in serializer.validated_data["messages"]]
        results = message_schedule_many(items=items)
        return Response(
            {"messages": [MessageCreatedSerializer.represent(r.message) for r in results]},
            status=status.HTTP_201_CREATED,
        )

    def _bulk(self, request, kind: str) -> Response:
        query = MessageMatchSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        filters = {k: v for k, v in query.validated_data.items() if k != "dry_run"}
        count = message_bulk_matching(kind=kind, filters=filters, dry_run=query.validated_data["dry_run"],
                                      requested_by=request.user.get_username())
        return Response({"count": count})

    @extend_schema(request=MessageMatchSerializer, responses={200: CountSerializer},
                   operation_id="messages_cancel_matching")
    @action(detail=False, methods=["post"], url_path="cancel")
    def cancel_matching(self, request):
        """Cancel every pending or published message matching the filters, in batches; or count
        them (dry_run). Progress shows in the admin (Bulk actions)."""
        return self._bulk(request, "cancel")

    @extend_schema(request=MessageMatchSerializer, responses={200: CountSerializer},
                   operation_id="messages_republish_matching")
    @action(detail=False, methods=["post"], url_path="republish")
    def republish_matching(self, request):
        """Republish every failed message matching the filters, in batches; or count them (dry_run)."""
        return self._bulk(request, "republish")

    @extend_schema(request=None, responses={200: StatusSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        message = message_cancel(message_id=pk)
        return Response({"id": message.id, "status": message.status})

    @extend_schema(request=None, responses={200: StatusSerializer})
    @action(detail=True, methods=["post"])
    def republish(self, request, pk=None):
        message = message_republish(message_id=pk)
        return Response({"id": message.id, "status": message.status})


class ScheduleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Recurring schedules: each run is a scheduled message, made ahead of its time (its runs:
    ``GET /api/messages/?schedule=<key>``)."""

    serializer_class = ScheduleSerializer
    permission_classes = [ModelPermissions]
    action_permissions = {
        "create": ["scheduling.change_schedule"],  # an upsert may change an existing schedule
        "pause": ["scheduling.pause_schedule"],
        "resume": ["scheduling.pause_schedule"],
    }
    http_method_names = ["get", "post", "delete", "head", "options"]
    lookup_field = "key"
    lookup_value_regex = r"[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*"

    def get_queryset(self):
        return schedule_list()

    @extend_schema(request=ScheduleWriteSerializer, responses={201: ScheduleSerializer, 200: ScheduleSerializer})
    def create(self, request):
        """Create the schedule ``key``, or update it (upsert): 201 when created, 200 when updated.
        A change to its rule, payload or endpoint cancels its runs to come and makes them again."""
        serializer = ScheduleWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        schedule, created = schedule_upsert(**serializer.to_service())
        return Response(ScheduleSerializer(schedule).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None})
    def destroy(self, request, key=None):
        """Delete the schedule and cancel its runs to come; its past runs stay listed by its key."""
        schedule_delete(key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: ScheduleSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request, key=None):
        """No more runs; the runs already made are cancelled."""
        return Response(ScheduleSerializer(schedule_set_paused(key=key, paused=True)).data)

    @extend_schema(request=None, responses={200: ScheduleSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, key=None):
        """Runs again from now on (runs that fell while paused are not made up)."""
        return Response(ScheduleSerializer(schedule_set_paused(key=key, paused=False)).data)

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
