"""Teams, their members and their API keys. A team owns endpoints and schedules (endpoints.py, schedules.py); a
message belongs to its endpoint's team. Registered through the package (__init__.py)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from scheduling.core.roles import ADMIN, MEMBER, VIEWER

DEFAULT_TEAM = "default"  # every row and user from before teams; what one-team deployments use
TEAM_NAME_MAX = 40
# Lower-case words joined by single '-': an endpoint's queue is "<team>--<name>", so a team name
# never holds "--" and the first "--" of a queue always ends its team (docs/guides/teams.md).
team_name_validator = RegexValidator(
    r"^[a-z0-9]+(?:-[a-z0-9]+)*\Z",
    "Use lower-case letters and digits, in words joined by single '-' (e.g. billing or growth-eu).",
    code="invalid_team_name",
)


class Team(models.Model):
    """A tenant of the platform. The quotas and grants are set by operators (the admin); empty
    quota fields take the platform's defaults (DELAY_TEAM_*)."""

    name = models.CharField(max_length=TEAM_NAME_MAX, unique=True, validators=[team_name_validator])
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # quotas (docs/guides/teams.md#quotas): empty = the platform's default
    max_in_flight = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="messages pending or published at once (empty: the platform's default)")
    max_in_flight_bytes = models.PositiveBigIntegerField(
        null=True, blank=True,
        help_text="bytes of payload (JSON) in flight at once, copies still in the cascade included (empty: the "
                  "platform's default)")
    max_schedules = models.PositiveIntegerField(null=True, blank=True, help_text="recurring schedules")
    max_endpoints = models.PositiveIntegerField(null=True, blank=True, help_text="endpoints")
    min_schedule_interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="the shortest time between two runs of a recurring schedule")
    api_rate = models.CharField(max_length=32, blank=True,
                                help_text="API requests of the whole team, e.g. 1000/second, or off")
    key_api_rate = models.CharField(max_length=32, blank=True,
                                    help_text="API requests of each of its keys, e.g. 100/second, or off")
    # grants (operators only): what the platform's own settings allow, narrowed or widened per team
    celery_task_allowlist = models.TextField(
        blank=True, help_text="fnmatch patterns of the Celery tasks its endpoints and messages may run, one per "
                              "line or comma-separated; a task must also match the platform's allowlist")
    webhook_allowed_networks = models.TextField(
        blank=True, help_text="CIDRs its webhooks may reach although the SSRF guard refuses them (private, "
                              "loopback, ...), one per line or comma-separated")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# the default team runs every task the platform's allowlist allows, as every endpoint did before teams
DEFAULT_TEAM_GRANTS = {"celery_task_allowlist": "*"}


def default_team_id() -> int:
    """The ``default`` team's id (made on first use): rows made without a team belong to it, as
    everything did before teams."""
    return Team.objects.get_or_create(name=DEFAULT_TEAM, defaults=DEFAULT_TEAM_GRANTS)[0].pk


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = VIEWER, "viewer"
        MEMBER = MEMBER, "member"
        ADMIN = ADMIN, "admin"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team_and_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ApiKey(models.Model):
    """A credential for the API: a team's (with scopes) or a user's (acting as that user). Only a
    SHA-256 digest of the key is stored, and a short prefix to recognise it by; the key itself is
    shown once, when made (teams/keys.py)."""

    name = models.CharField(max_length=100, blank=True, help_text="a label: what uses it")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="api_keys")
    prefix = models.CharField(max_length=16, db_index=True, help_text="the key's first characters")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    scopes = ArrayField(models.CharField(max_length=16), default=list)
    legacy_token = models.BooleanField(
        default=False, help_text="a DRF token from before keys: also accepted as 'Authorization: Token <key>'")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The person's key this team key was made with: it is refused once that key is revoked, expired
    # or its person inactive (docs/guides/teams.md#keys-made-with-a-persons-key). No database
    # constraint: the previous release deletes users without knowing of it, and a key whose
    # parent row is gone is refused too.
    parent = models.ForeignKey("self", on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True,
                               related_name="children", editable=False,
                               help_text="the person's key it was made with, if any")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(condition=models.Q(team__isnull=True) ^ models.Q(user__isnull=True),
                                   name="api_key_of_a_team_or_a_user"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or self.owner})"

    @property
    def owner(self) -> str:
        return f"team {self.team}" if self.team_id else f"user {self.user}"

    def state(self, now: datetime | None = None) -> str:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= now else "active"


class Invitation(models.Model):
    """A team admin's invitation of a user to the team with a role: the user becomes a member only
    by accepting it (services.invitation_accept). Made for any username, known or not, so that
    inviting answers the same for both; one of an unknown name (``user`` empty) is never accepted
    and expires (DELAY_INVITATION_EXPIRES)."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        ACCEPTED = "accepted", "accepted"
        DECLINED = "declined", "declined"
        REVOKED = "revoked", "revoked"  # by a team admin, or replaced by a newer invitation

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150, help_text="the name the team admin gave")
    # no database constraint: the previous release deletes users without knowing of invitations
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
                             db_constraint=False, related_name="team_invitations",
                             help_text="that user, if one existed")
    role = models.CharField(max_length=16, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    invited_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "state"], name="invitation_user_state"),
                   models.Index(fields=["team", "username"], name="invitation_team_username")]

    def __str__(self) -> str:
        return f"{self.username} to {self.team} ({self.role})"

    def shown_state(self, now: datetime | None = None) -> str:
        """Its state, with a pending invitation past its expiry shown as expired."""
        if self.state == self.State.PENDING and self.expires_at <= (now or timezone.now()):
            return "expired"
        return self.state
