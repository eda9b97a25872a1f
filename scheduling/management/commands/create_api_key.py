"""Make an API key: a team's, with scopes, or a user's, acting as that user. The key is printed
alone on the last line (``KEY=$(... | tail -1)``) and never shown again: only its digest is kept."""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from scheduling.config.conf import setting_name
from scheduling.core.durations import parse_duration
from scheduling.core.roles import SCOPES
from scheduling.management.commands._base import PlatformCommand, command_caller, command_team
from scheduling.management.commands.create_team import _errors
from scheduling.teams.services import api_key_create


class Command(PlatformCommand):
    help = ("Make an API key: create_api_key (--team NAME --scope SCOPE ... | --user USERNAME) "
            "[--expires-in DURATION] [--name LABEL]; the key is the last line")

    def add_arguments(self, parser):
        owner = parser.add_mutually_exclusive_group(required=True)
        owner.add_argument("--team", help="a team's key, with the scopes given")
        owner.add_argument("--user", help="a key that acts as this user (a superuser's: an operator's)")
        parser.add_argument("--scope", action="append", default=[],
                            help=f"all, or one of {', '.join(SCOPES)}; repeat for more (team keys)")
        parser.add_argument("--expires-in", help=f"e.g. 30d or 12h (default {setting_name('api_key_expires')}, at most "
                                                 f"{setting_name('api_key_max_expires')})")
        parser.add_argument("--name", default="", help="a label: what uses the key")

    def handle(self, *args, team, user, scope, expires_in, name, **options):
        owner = {}
        if team:
            if not scope:
                raise CommandError("a team's key needs --scope (all, or some of: " + ", ".join(SCOPES) + ")")
            owner["team"], owner["scopes"] = command_team(team), scope
        else:
            if scope:
                raise CommandError("--scope is for team keys: a user's key acts with the user's own roles")
            owner["user"] = get_user_model().objects.filter(username=user).first()
            if owner["user"] is None:
                raise CommandError(f"no user {user!r}")
        try:
            expiry = parse_duration(expires_in, name="--expires-in") if expires_in else None
            made = api_key_create(**owner, name=name, expires_in=expiry, created_by=command_caller(self).name)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError(_errors(exc)) from None
        row = made.row
        self.stdout.write(f"key {row.prefix}… of {row.owner}, scopes {', '.join(row.scopes)}, "
                          f"expires {row.expires_at:%Y-%m-%d %H:%M} UTC; shown once:")
        self.stdout.write(made.key)
