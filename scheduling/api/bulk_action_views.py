"""The bulk actions by filter (/api/bulk-actions/): a job's status, read only; the jobs are started
by the messages' cancel and republish routes (message_views.py) and the admin's actions."""

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets

from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.api.serializers import BulkJobSerializer
from scheduling.core.roles import Action
from scheduling.models import BulkAction


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
