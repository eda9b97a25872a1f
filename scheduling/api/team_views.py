"""The teams' API: the caller's teams and their members, API keys, and the audit log."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response

from scheduling.api.headers import no_store
from scheduling.api.scoping import TeamScoped
from scheduling.api.team_serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeySerializer,
    AuditEventSerializer,
    AuditFilterSerializer,
    InvitationSentSerializer,
    InvitationSerializer,
    MembershipSerializer,
    MemberWriteSerializer,
    TeamSerializer,
)
from scheduling.audit.selectors import audit_list
from scheduling.core.roles import Action
from scheduling.models import ApiKey, Team
from scheduling.teams.authentication import TeamKeyUser
from scheduling.teams.invitations import (
    invitation_accept,
    invitation_create,
    invitation_decline,
    invitation_revoke,
)
from scheduling.teams.selectors import (
    api_key_list_of_user,
    invitation_list,
    invitation_list_for_user,
    membership_list,
    queryset_for_caller,
    team_pick,
)
from scheduling.teams.services import api_key_create, api_key_revoke, membership_remove, membership_set


class TeamViewSet(TeamScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Your teams, with their quotas; a team's members (its admins add, change and remove them).
    Teams are made, and their quotas and grants set, by platform operators (the admin, create_team)."""

    serializer_class = TeamSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9]+(?:-[a-z0-9]+)*"
    team_name_field = "name"
    team_actions = {"list": Action.READ, "retrieve": Action.READ, "members": Action.READ,
                    "set_member": Action.MEMBERS, "remove_member": Action.MEMBERS, "invitations": Action.MEMBERS,
                    "revoke_invitation": Action.MEMBERS}

    @staticmethod
    def team_id_of(obj) -> int:
        return obj.pk

    def get_queryset(self):
        return self.scoped(Team.objects.order_by("name"))

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "caller": self.caller}

    @extend_schema(responses={200: MembershipSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def members(self, request, name=None):
        team = self.get_object()
        return Response(MembershipSerializer(membership_list(team_ids=[team.pk]), many=True).data)

    @extend_schema(request=MemberWriteSerializer, responses={200: MembershipSerializer})
    @action(detail=True, methods=["post"], url_path="members/set")
    def set_member(self, request, name=None):
        """Change a member's role (team admins). People join by accepting an invitation; only
        operators add a user here directly."""
        team = self.get_object()
        data = MemberWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = membership_set(team=team, add=self.caller.operator, **data.validated_data)
        return Response(MembershipSerializer(membership).data)

    @extend_schema(methods=["get"], request=None, responses={200: InvitationSerializer(many=True)})
    @extend_schema(methods=["post"], request=MemberWriteSerializer, responses={202: InvitationSentSerializer})
    @action(detail=True, methods=["get", "post"])
    def invitations(self, request, name=None):
        """The team's invitations (team admins), newest first; POST invites a username with a
        role: they join when they accept it (POST /api/invitations/<id>/accept/). The answer is
        the same whether the name is a user or not."""
        team = self.get_object()
        if request.method == "GET":
            return Response(InvitationSerializer(invitation_list(team_ids=[team.pk])[:200], many=True).data)
        data = MemberWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        invitation_create(team=team, invited_by=self.caller.name, **data.validated_data)
        return Response({"team": team.name, **data.validated_data,
                         "detail": "invited: they join the team when they accept (if the user exists)"},
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: InvitationSerializer})
    @action(detail=True, methods=["post"], url_path=r"invitations/(?P<invitation_id>[0-9]{1,18})/revoke")
    def revoke_invitation(self, request, name=None, invitation_id=None):
        """Take a pending invitation back (team admins)."""
        team = self.get_object()
        invitation = invitation_list(team_ids=[team.pk]).filter(pk=int(invitation_id)).first()
        if invitation is None:
            raise Http404
        return Response(InvitationSerializer(invitation_revoke(invitation=invitation)).data)

    @extend_schema(request=MemberWriteSerializer(partial=True), responses={204: None})
    @action(detail=True, methods=["post"], url_path="members/remove")
    def remove_member(self, request, name=None):
        """Take a user out of the team (team admins)."""
        team = self.get_object()
        username = request.data.get("username") if isinstance(request.data, dict) else None
        if not isinstance(username, str) or not username or len(username) > 150:
            raise DjangoValidationError({"username": "the user to remove"})
        membership_remove(team=team, username=username)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApiKeyViewSet(TeamScoped, mixins.ListModelMixin, viewsets.GenericViewSet):
    """API keys of your teams (team admins; people only: a key never makes or revokes keys). The
    key itself is in the answer to creating it, once; only its digest is kept."""

    serializer_class = ApiKeySerializer
    lookup_field = "prefix"
    lookup_value_regex = r"dpk_[A-Za-z0-9_-]{8}|[0-9a-f]{8}"
    team_actions = {"list": Action.KEYS, "create": Action.KEYS, "revoke": Action.KEYS}

    def get_queryset(self):
        keys = ApiKey.objects.select_related("team", "user", "parent").filter(team__isnull=False)
        return self.scoped(queryset_for_caller(queryset=keys, caller=self.caller, action=Action.KEYS))

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request):
        data = ApiKeyCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = team_pick(caller=self.caller, action=Action.KEYS, name=values.get("team"))
        # made with a person's key: it is revoked with that key (docs/guides/teams.md)
        parent = request.auth if isinstance(request.auth, ApiKey) and request.auth.user_id else None
        made = api_key_create(team=team, scopes=values["scopes"], name=values.get("name", ""),
                              expires_in=values.get("expires_in"), created_by=self.caller.name, parent=parent)
        return no_store(Response({**ApiKeySerializer(made.row).data, "key": made.key},
                                 status=status.HTTP_201_CREATED))

    @extend_schema(request=None, responses={200: ApiKeySerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, prefix=None):
        """Revoke a key now: it is refused (401) from the next request on."""
        return _revoked(self.get_queryset(), prefix)


def _revoked(keys, prefix: str) -> Response:
    """Revoke the one key of ``keys`` with this prefix (none, or two alike: a 404)."""
    found = list(keys.filter(prefix=prefix)[:2])
    if len(found) != 1:
        raise Http404
    return Response(ApiKeySerializer(api_key_revoke(key=found[0])).data)


class IsPerson(BasePermission):
    """A person (a session, or a key acting as them); never a team's key."""

    message = "a team's key has no invitations or keys of its own: use a person's session or key"

    def has_permission(self, request, view):
        return not isinstance(request.user, TeamKeyUser)


class OwnApiKeyViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Your own keys: those that act as you (made with create_api_key --user, or by an operator).
    Revoking one also revokes the team keys made with it."""

    serializer_class = ApiKeySerializer
    permission_classes = [IsAuthenticated, IsPerson]
    lookup_field = "prefix"
    lookup_value_regex = r"dpk_[A-Za-z0-9_-]{8}|[0-9a-f]{8}"

    def get_queryset(self):
        return api_key_list_of_user(user=self.request.user).select_related("parent")

    @extend_schema(request=None, responses={200: ApiKeySerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, prefix=None):
        """Revoke one of your keys now (and the team keys made with it)."""
        return _revoked(self.get_queryset(), prefix)


class InvitationViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Your invitations to teams that you may still answer: accept one to join the team with its
    role, or decline it. Someone else's invitation is a 404."""

    serializer_class = InvitationSerializer
    permission_classes = [IsAuthenticated, IsPerson]
    lookup_value_regex = r"[0-9]{1,18}"

    def get_queryset(self):
        return invitation_list_for_user(user=self.request.user)

    @extend_schema(request=None, responses={200: InvitationSerializer})
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        return Response(InvitationSerializer(invitation_accept(invitation_id=int(pk), user=request.user)).data)

    @extend_schema(request=None, responses={200: InvitationSerializer})
    @action(detail=True, methods=["post"])
    def decline(self, request, pk=None):
        return Response(InvitationSerializer(invitation_decline(invitation_id=int(pk), user=request.user)).data)


class AuditPagination(CursorPagination):
    """Newest first; a malformed cursor is a 400 (DRF's own answers 404)."""

    ordering = ("-at", "-id")
    page_size = 50

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except exceptions.NotFound:
            raise exceptions.ValidationError({"cursor": ["malformed cursor: use a next or previous link"]}) from None


class AuditViewSet(TeamScoped, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The audit log: every change made through the API, the admin or a command, with who, when,
    from where and the values before and after (secrets redacted). Team admins read their teams'
    (a key needs the audit scope); operators read everything."""

    serializer_class = AuditEventSerializer
    pagination_class = AuditPagination
    team_actions = {"list": Action.AUDIT}

    @extend_schema(parameters=[AuditFilterSerializer])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        filters = AuditFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        return audit_list(caller=self.caller, **filters.validated_data)
