"""Shapes of the teams' API: teams (with their quotas and use), members, keys, the audit log."""

from rest_framework import serializers

from scheduling.api.validation import RefuseControlCharacters
from scheduling.config.conf import setting_name
from scheduling.core.durations import parse_duration
from scheduling.core.roles import ROLES, SCOPES
from scheduling.models import ApiKey, Invitation, Membership, Team
from scheduling.teams.quotas import COUNTS, team_limit, team_min_interval_ms


class TeamSerializer(serializers.ModelSerializer):
    quotas = serializers.SerializerMethodField(help_text="each count quota's limit for this team")
    role = serializers.SerializerMethodField(help_text="your role in it (null: you operate the platform)")

    class Meta:
        model = Team
        fields = ["name", "created_at", "role", "quotas", "api_rate", "key_api_rate", "celery_task_allowlist",
                  "webhook_allowed_networks"]
        read_only_fields = fields

    def get_quotas(self, team) -> dict[str, int]:
        limits = {quota: team_limit(team=team, quota=quota) for quota in COUNTS}
        return {**limits, "min_schedule_interval_seconds": team_min_interval_ms(team=team) // 1000}

    def get_role(self, team) -> str | None:
        return self.context["caller"].roles.get(team.pk)


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at"]
        read_only_fields = fields


class MemberWriteSerializer(RefuseControlCharacters, serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=list(ROLES), help_text="viewer, member or admin")


class InvitationSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    state = serializers.SerializerMethodField(help_text="pending, accepted, declined, revoked or expired")

    class Meta:
        model = Invitation
        fields = ["id", "team", "username", "role", "state", "invited_by", "created_at", "expires_at", "answered_at"]
        read_only_fields = fields

    def get_state(self, invitation) -> str:
        return invitation.shown_state()


class InvitationSentSerializer(serializers.Serializer):
    """The answer to an invitation: the same whether the username is a user or not."""

    team = serializers.CharField()
    username = serializers.CharField()
    role = serializers.CharField()
    detail = serializers.CharField()


class ApiKeySerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True, allow_null=True)
    user = serializers.CharField(source="user.username", read_only=True, allow_null=True)
    state = serializers.SerializerMethodField()

    made_with = serializers.CharField(source="parent.prefix", read_only=True, allow_null=True, default=None,
                                      help_text="the prefix of the person's key it was made with (revoked with it)")

    class Meta:
        model = ApiKey
        fields = ["prefix", "name", "team", "user", "scopes", "state", "created_at", "created_by", "expires_at",
                  "last_used_at", "revoked_at", "made_with"]
        read_only_fields = fields

    def get_state(self, key) -> str:
        return key.state()


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="the key itself: shown here once, never again")

    class Meta(ApiKeySerializer.Meta):
        fields = ["key", *ApiKeySerializer.Meta.fields]
        read_only_fields = fields


class DurationField(serializers.CharField):
    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        try:
            return parse_duration(text, name="expires_in")
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class ApiKeyCreateSerializer(RefuseControlCharacters, serializers.Serializer):
    team = serializers.CharField(max_length=40, required=False,
                                 help_text="the team the key belongs to (needed if you administer several)")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=["all", *SCOPES]), min_length=1,
                                   max_length=len(SCOPES) + 1, help_text=f"all, or some of {', '.join(SCOPES)}")
    name = serializers.CharField(max_length=100, required=False, allow_blank=True, help_text="what uses it")
    expires_in = DurationField(max_length=20, required=False,
                               help_text=f"e.g. 30d or 12h (default {setting_name('api_key_expires')}, at most "
                                         f"{setting_name('api_key_max_expires')})")


class AuditEventSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    source = serializers.CharField()
    actor = serializers.CharField()
    key_prefix = serializers.CharField()
    team = serializers.CharField(source="team_name")
    action = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    extra = serializers.JSONField(allow_null=True)
    ip = serializers.CharField(allow_null=True)
    user_agent = serializers.CharField()
    request_id = serializers.CharField()


class AuditFilterSerializer(RefuseControlCharacters, serializers.Serializer):
    team = serializers.CharField(required=False, max_length=40)
    action = serializers.CharField(required=False, max_length=64, help_text="e.g. endpoint.rotate_secret")
    object_type = serializers.CharField(required=False, max_length=64)
    object_id = serializers.CharField(required=False, max_length=100)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
