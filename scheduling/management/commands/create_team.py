"""Make a team, with its first members (users that exist already) and, optionally, the grants an
operator gives it."""

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from scheduling.core.roles import ROLES
from scheduling.management.commands._base import PlatformCommand
from scheduling.teams.services import membership_set, team_create


def _member(text: str) -> tuple[str, str]:
    user, colon, role = text.rpartition(":")
    if not colon or not user or role not in ROLES:
        raise CommandError(f"--member {text!r} is not USER:ROLE (ROLE: {', '.join(ROLES)})")
    return user, role


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items()) \
        if hasattr(exc, "error_dict") else "; ".join(exc.messages)


class Command(PlatformCommand):
    help = "Make a team: create_team NAME [--member USER:ROLE ...] [--allow-task PATTERN ...] [--allow-network CIDR ...]"

    def add_arguments(self, parser):
        parser.add_argument("name", help="lower-case words joined by '-', e.g. billing or growth-eu")
        parser.add_argument("--member", action="append", default=[], metavar="USER:ROLE",
                            help=f"a user and their role ({', '.join(ROLES)}); repeat for more")
        parser.add_argument("--allow-task", action="append", default=[], metavar="PATTERN",
                            help="a Celery task pattern its endpoints and messages may run (within the platform's "
                                 "allowlist), e.g. billing.tasks.*; repeat for more")
        parser.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                            help="a network its webhooks may reach that the SSRF guard refuses, e.g. 10.1.0.0/16")

    def handle(self, *args, name, member, allow_task, allow_network, **options):
        members = [_member(text) for text in member]
        try:
            with transaction.atomic():
                team = team_create(name=name, celery_task_allowlist="\n".join(allow_task),
                                   webhook_allowed_networks="\n".join(allow_network))
                for username, role in members:
                    membership_set(team=team, username=username, role=role, add=True)  # an operator adds
        except ValidationError as exc:
            raise CommandError(_errors(exc)) from None
        listed = ", ".join(f"{user} ({role})" for user, role in members) or "none yet"
        self.stdout.write(f"team {team.name} made; members: {listed}")
