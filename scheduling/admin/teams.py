"""Teams, their members, invitations and API keys. Operators make teams and set their quotas and
grants, and add members directly; a team's admins invite people (they join by accepting: the
API's /api/invitations/), change members' roles and manage keys (a key is shown once, when made;
only its digest is kept); everyone else reads."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.utils import timezone

from scheduling.admin.base import OPERATOR_ERRORS, ControlRoomAdmin, TeamListFilter, add_service_errors
from scheduling.config.conf import setting_name
from scheduling.core.durations import parse_duration
from scheduling.core.roles import ROLES, SCOPES, Action
from scheduling.models import ApiKey, Invitation, Membership, Team
from scheduling.teams.invitations import invitation_create, invitation_revoke
from scheduling.teams.selectors import queryset_for_caller
from scheduling.teams.services import (
    TEAM_SETTINGS,
    api_key_create,
    api_key_revoke,
    membership_remove,
    membership_set,
    team_create,
    team_update,
)


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ["name", *TEAM_SETTINGS]


@admin.register(Team)
class TeamAdmin(ControlRoomAdmin):
    """Operators add teams and change their quotas and grants (through the services, audited)."""

    list_display = ("name", "created_at", "max_in_flight", "max_schedules", "max_endpoints",
                    "min_schedule_interval_seconds", "api_rate", "key_api_rate")
    search_fields = ("name",)
    team_actions = {"view": Action.READ, "add": None, "change": None}

    def team_id_of(self, obj):
        return obj.pk

    def get_form(self, request, obj=None, change=False, **kwargs):
        return TeamForm

    def get_readonly_fields(self, request, obj=None):
        return ("name", "created_at") if obj is not None else ()

    def get_fields(self, request, obj=None):
        return ["name", "created_at", *TEAM_SETTINGS] if obj is not None else ["name", *TEAM_SETTINGS]

    def save_model(self, request, obj, form, change):
        values = {field: form.cleaned_data.get(field) for field in TEAM_SETTINGS if field in form.cleaned_data}
        if change:
            team_update(team=obj, **values)
        else:
            created = team_create(name=form.cleaned_data["name"], **values)
            obj.pk, obj.id = created.pk, created.pk

    def log_addition(self, request, obj, message):
        return None  # the audit log has it (Django's admin log would repeat it)

    log_change = log_addition


class MemberForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    username = forms.CharField(max_length=150, help_text="a member (operators may also add any existing user; "
                                                         "team admins invite people: Invitations)")
    role = forms.ChoiceField(choices=[(r, r) for r in ROLES])

    def __init__(self, *args, caller, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = queryset_for_caller(queryset=Team.objects.order_by("name"), caller=caller,
                                                           action=Action.MEMBERS)


class InvitationForm(MemberForm):
    username = forms.CharField(max_length=150, help_text="who to invite: they join when they accept")


@admin.register(Membership)
class MembershipAdmin(ControlRoomAdmin):
    list_display = ("user", "team", "role", "created_at")
    list_filter = (TeamListFilter, "role")
    search_fields = ("user__username",)
    list_select_related = ("team", "user")
    team_actions = {"view": Action.READ, "add": Action.MEMBERS, "change": Action.MEMBERS,
                    "remove": Action.MEMBERS}
    actions = ("remove_members",)
    fields = ("team", "user", "role", "created_at")
    readonly_fields = fields

    def has_remove_permission(self, request):
        return self.may(request, "remove")

    @admin.action(description="Remove selected members from their team", permissions=["remove"])
    def remove_members(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset.select_related("team", "user"), Action.MEMBERS),
                      lambda m: membership_remove(team=m.team, username=m.user.get_username()), "Removed")

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)

        def form(data, initial):
            return MemberForm(data, initial=initial, caller=caller)

        title = "Add a member, or change a member's role" if caller.operator else "Change a member's role"
        return self.service_form_view(request, form, lambda data: membership_set(add=caller.operator, **data),
                                      title=title, done="Saved")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_change_permission(request, obj):
            return super().change_view(request, object_id, form_url, extra_context)
        caller = self.caller(request)

        def form(data, initial):
            return MemberForm(data, initial=initial, caller=caller)

        return self.service_form_view(
            request, form, lambda data: membership_set(add=caller.operator, **data), title="Change a member's role",
            obj=obj,
            initial={"team": obj.team_id, "username": obj.user.get_username(), "role": obj.role}, done="Saved")


@admin.register(Invitation)
class InvitationAdmin(ControlRoomAdmin):
    """A team's invitations, for its admins: invite a username (the same answer whether it is a user
    or not) and revoke a pending one; the invited person accepts through the API."""

    list_display = ("username", "team", "role", "invitation_state", "invited_by", "created_at", "expires_at")
    list_filter = (TeamListFilter, "state")
    search_fields = ("=username",)
    list_select_related = ("team",)
    team_actions = {"view": Action.MEMBERS, "add": Action.MEMBERS, "change": None, "revoke": Action.MEMBERS}
    actions = ("revoke",)
    fields = ("team", "username", "role", "invitation_state", "invited_by", "created_at", "expires_at", "answered_at")
    readonly_fields = fields

    def get_queryset(self, request):
        return queryset_for_caller(queryset=super().base_queryset(request), caller=self.caller(request),
                                   action=Action.MEMBERS)

    @admin.display(description="state")
    def invitation_state(self, invitation):
        return invitation.shown_state()

    def has_revoke_permission(self, request):
        return self.may(request, "revoke")

    @admin.action(description="Revoke selected invitations", permissions=["revoke"])
    def revoke(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset.select_related("team"), Action.MEMBERS),
                      lambda invitation: invitation_revoke(invitation=invitation), "Revoked")

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)

        def form(data, initial):
            return InvitationForm(data, initial=initial, caller=caller)

        return self.service_form_view(request, form, lambda data: invitation_create(invited_by=caller.name, **data),
                                      title="Invite someone to a team", done="Invited")


class ApiKeyForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    scopes = forms.MultipleChoiceField(choices=[(s, f"{s}: {why}") for s, why in SCOPES.items()],
                                       widget=forms.CheckboxSelectMultiple)
    name = forms.CharField(max_length=100, required=False, help_text="what uses it")
    expires_in = forms.CharField(max_length=20, required=False,
                                 help_text=f"e.g. 30d or 12h (empty: {setting_name('api_key_expires')})")

    def __init__(self, *args, caller, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = queryset_for_caller(queryset=Team.objects.order_by("name"), caller=caller,
                                                           action=Action.KEYS)

    def clean_expires_in(self):
        text = self.cleaned_data["expires_in"].strip()
        try:
            return parse_duration(text, name="expires in") if text else None
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(ApiKey)
class ApiKeyAdmin(ControlRoomAdmin):
    """Keys of the user's teams (users' own keys are made with create_api_key --user). The key is on
    the page that answers its creation, and nowhere else afterwards."""

    list_display = ("prefix", "name", "owner", "scopes", "key_state", "expires_at", "last_used_at", "created_by")
    list_filter = (TeamListFilter,)
    search_fields = ("=prefix", "name")
    list_select_related = ("team", "user")
    team_actions = {"view": Action.KEYS, "add": Action.KEYS, "change": None, "revoke": Action.KEYS}
    actions = ("revoke",)
    fields = ("prefix", "name", "team", "user", "scopes", "key_state", "created_at", "created_by", "expires_at",
              "last_used_at", "revoked_at")
    readonly_fields = fields

    def get_queryset(self, request):
        return queryset_for_caller(queryset=super().base_queryset(request), caller=self.caller(request),
                                   action=Action.KEYS)

    @admin.display(description="state")
    def key_state(self, key):
        return key.state(timezone.now())

    def has_revoke_permission(self, request):
        return self.may(request, "revoke")

    @admin.action(description="Revoke selected keys (refused from the next request on)", permissions=["revoke"])
    def revoke(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset.filter(revoked_at__isnull=True), Action.KEYS),
                      lambda key: api_key_revoke(key=key), "Revoked")

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)
        form = ApiKeyForm(request.POST if request.method == "POST" else None, caller=caller)
        if form.is_bound and form.is_valid():
            try:
                made = api_key_create(created_by=caller.name, **form.cleaned_data)
            except Exception as exc:  # noqa: BLE001 - shown on the form, as the other admin forms do
                if isinstance(exc, OPERATOR_ERRORS):
                    form.add_error(None, str(exc))
                elif hasattr(exc, "message_dict") or hasattr(exc, "messages"):
                    add_service_errors(form, exc, {"expires_in": "expires_in"})
                else:
                    raise
            else:
                self.message_user(request, f"Key {made.row.prefix}… made: copy it now", messages.SUCCESS)
                return TemplateResponse(request, "admin/scheduling/apikey/created.html", {
                    **self.admin_site.each_context(request), "title": "New API key", "opts": self.opts,
                    "key": made.key, "row": made.row})
        return TemplateResponse(request, "admin/scheduling/apikey/add.html", {
            **self.admin_site.each_context(request), "title": "Add API key", "opts": self.opts, "form": form})
