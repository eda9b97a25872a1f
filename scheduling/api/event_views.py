"""Thin views of subscriptions and events (issue 48; docs/guides/events.md): parse, call one
service of events/services.py, format. Subscriptions need the endpoints scope (they decide where
a team's messages go, as an endpoint does); publishing needs write, cancelling cancel, as a
message's would."""

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from scheduling.api.event_serializers import (
    CancelledSerializer,
    EventCreateSerializer,
    EventSerializer,
    SubscriptionCreateSerializer,
    SubscriptionSerializer,
)
from scheduling.api.headers import TRACEPARENT_PARAMETER
from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.core.errors import NotFound
from scheduling.core.roles import Action
from scheduling.core.text import has_nul
from scheduling.events.selectors import event_list, event_list_messages, subscription_list
from scheduling.events.services import (
    event_cancel,
    event_get,
    event_publish,
    subscription_create,
    subscription_delete,
)
from scheduling.teams.selectors import team_pick


class CreatedCursorPagination(CursorPagination):
    """Newest first by (created_at, id), 50 a page; a malformed cursor is a 400 naming it."""

    ordering = ("-created_at", "-id")
    page_size = 50

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except Exception:  # DRF's NotFound, or a position its parser cannot read
            raise ValidationError({self.cursor_query_param: ["malformed cursor: use a page's next or previous link"]}) \
                from None


class SubscriptionViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """A team's endpoints subscribed to topic patterns: an event published to a matching topic
    (and passing the filter) makes a message for the endpoint."""

    http_method_names = ["get", "post", "delete", "head", "options"]
    serializer_class = SubscriptionSerializer
    pagination_class = CreatedCursorPagination
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "create": Action.ENDPOINTS,
                    "destroy": Action.ENDPOINTS}

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: the model is enough
            return subscription_list().none()
        return self.scoped(subscription_list())

    def get_object(self):
        found = self.get_queryset().filter(pk=self.kwargs["pk"]).first() if _uuid(self.kwargs.get("pk")) else None
        if found is None:
            raise NotFound(f"no subscription {str(self.kwargs.get('pk'))[:64]}")
        self.check_object_permissions(self.request, found)
        return found

    def acting_team_ids(self) -> set[int]:
        return super().acting_team_ids() if _uuid(self.kwargs.get("pk")) else set()

    @extend_schema(parameters=[TEAM_PARAMETER])
    def list(self, request, *args, **kwargs):
        """Newest first, 50 a page: follow ``next`` (a cursor)."""
        return super().list(request, *args, **kwargs)

    @extend_schema(request=SubscriptionCreateSerializer, responses={201: SubscriptionSerializer})
    def create(self, request):
        """Subscribe one of the team's endpoints to a topic pattern, with an optional filter."""
        body = SubscriptionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        team = team_pick(caller=self.caller, action=Action.ENDPOINTS, name=data.get("team"))
        subscription = subscription_create(team=team, topic=data["topic"], endpoint=data["endpoint"],
                                           filter=data.get("filter"))
        return Response(SubscriptionSerializer(subscription).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        """Events published from now on no longer reach its endpoint (messages already made stay)."""
        subscription_delete(subscription=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class EventViewSet(TeamScoped, viewsets.GenericViewSet):
    """Publish once to a topic: each of the team's endpoints whose subscription matches gets a
    message of its own (delivered, retried, listed and cancelled as any message)."""

    http_method_names = ["get", "post", "head", "options"]
    serializer_class = EventSerializer
    team_actions = {"retrieve": Action.READ, "create": Action.SCHEDULE, "cancel": Action.CANCEL}

    def get_queryset(self):  # the team a detail route charges (throttles.py); reads go through event_get
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: the model is enough
            return event_list().none()
        return self.scoped(event_list())

    def acting_team_ids(self) -> set[int]:
        return super().acting_team_ids() if _uuid(self.kwargs.get("pk")) else set()

    @extend_schema(request=EventCreateSerializer, responses={201: EventSerializer, 200: EventSerializer},
                   parameters=[TRACEPARENT_PARAMETER])
    def create(self, request):
        """201 with the event and its messages ([] when no subscription matched: the event is kept);
        200 with the same event when its idempotency_key was used already in the team. Refused whole
        (403) when its messages would cross the team's in-flight quota."""
        body = EventCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        arguments = body.to_service()
        team = team_pick(caller=self.caller, action=Action.SCHEDULE, name=arguments.pop("team_name"))
        published = event_publish(team=team, caller=self.caller, traceparent=request.headers.get("traceparent"),
                                  **arguments)
        data = EventSerializer(published.event, context={"messages": published.messages}).data
        return Response(data, status=status.HTTP_201_CREATED if published.created else status.HTTP_200_OK)

    @extend_schema(responses={200: EventSerializer})
    def retrieve(self, request, pk=None):
        event = event_get(event_id=pk, caller=self.caller)
        return Response(EventSerializer(event, context={"messages": event_list_messages(event_id=event.pk)}).data)

    @extend_schema(request=None, responses={200: CancelledSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel the event's messages still waiting; ``cancelled``: how many (0 when none was)."""
        _, cancelled = event_cancel(event_id=pk, caller=self.caller)
        return Response({"cancelled": cancelled})


def _uuid(value) -> bool:
    """A value that can be a UUID primary key (anything else: no such row, not a database error)."""
    try:
        uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return False
    return not has_nul(str(value))
