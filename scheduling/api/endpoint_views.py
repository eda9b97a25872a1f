"""Thin views of endpoints (/api/endpoints/): parse, call one service of endpoints/services.py,
format. A webhook endpoint's signing secret is answered once, never read back."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from scheduling.api.headers import no_store
from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.api.serializers import (
    EndpointCreatedSerializer,
    EndpointSerializer,
    EndpointUpdateSerializer,
    RotateSecretSerializer,
    SecretRotatedSerializer,
)
from scheduling.core.roles import Action
from scheduling.endpoints.selectors import endpoint_count_messages, endpoint_list
from scheduling.endpoints.services import (
    endpoint_create,
    endpoint_enable,
    endpoint_rotate_secret,
    endpoint_set_active,
    endpoint_update,
)
from scheduling.models import Endpoint
from scheduling.teams.selectors import team_pick


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
