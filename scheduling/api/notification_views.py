"""Notification routes (issue 48): where a team hears what happened. Thin: parse, call one
service, format; reads start from the caller's teams (queryset_for_caller)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from scheduling.api.notification_serializers import (
    NotificationRouteCreateSerializer,
    NotificationRouteSerializer,
)
from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.core.roles import Action
from scheduling.notifications.selectors import notification_route_list
from scheduling.notifications.services import notification_route_create, notification_route_delete
from scheduling.teams.selectors import team_pick


class RouteCursorPagination(CursorPagination):
    """Newest first, 50 a page, by cursor (as the other lists)."""

    ordering = ("-created_at", "-id")
    page_size = 50


class NotificationRouteViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                               mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Where the platform tells a team what happened: each route names one of its endpoints and the
    notification types that endpoint takes. Each notification is a message to it."""

    serializer_class = NotificationRouteSerializer
    pagination_class = RouteCursorPagination
    # routes are the team's configuration, as its endpoints: the endpoints scope (admins) to change
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "create": Action.ENDPOINTS,
                    "destroy": Action.ENDPOINTS}
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generation: the model is enough
            return notification_route_list().none()
        return self.scoped(notification_route_list())

    def get_object(self):
        try:
            found = self.get_queryset().filter(pk=self.kwargs["pk"]).first()
        except (DjangoValidationError, ValueError):
            found = None
        if found is None:
            raise Http404
        self.check_object_permissions(self.request, found)
        return found

    @extend_schema(parameters=[TEAM_PARAMETER])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=NotificationRouteCreateSerializer, responses={201: NotificationRouteSerializer})
    def create(self, request):
        """Route notification types (``events``) to one of the team's endpoints; 400 naming the field
        for an unknown type, an endpoint not the team's, a Celery queue, or one already routed."""
        body = NotificationRouteCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = team_pick(caller=self.caller, action=Action.ENDPOINTS, name=body.validated_data.get("team"))
        route = notification_route_create(team=team, endpoint=body.validated_data["endpoint"],
                                          events=body.validated_data["events"])
        return Response(NotificationRouteSerializer(route).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        """Delete the route: its endpoint takes no more notifications."""
        notification_route_delete(route=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
