"""What every view of team data shares (TeamScoped): every read starts from the caller's teams
(queryset_for_caller) and every service is told who calls (core/caller.py)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework.permissions import IsAuthenticated

from scheduling.api.callers import request_caller
from scheduling.api.permissions import TeamPermissions
from scheduling.core.roles import Action
from scheduling.core.text import has_nul
from scheduling.teams.selectors import queryset_for_caller

TEAM_PARAMETER = OpenApiParameter("team", str, description="one of your teams: needed where a name is used by "
                                                           "several of them")


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
