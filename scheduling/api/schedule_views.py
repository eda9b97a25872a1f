"""Thin views of recurring schedules (/api/schedules/): parse, call one service of
schedules/services.py, format."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from scheduling.api.scoping import TEAM_PARAMETER, TeamScoped
from scheduling.api.serializers import (
    RunsSerializer,
    SchedulePreviewSerializer,
    ScheduleSerializer,
    ScheduleWriteSerializer,
)
from scheduling.core import schedule_rules as rules
from scheduling.core.roles import Action
from scheduling.schedules.selectors import schedule_list
from scheduling.schedules.services import (
    schedule_check_rule,
    schedule_delete,
    schedule_set_paused,
    schedule_upsert,
)
from scheduling.teams.selectors import team_pick


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
