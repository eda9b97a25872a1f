"""Cancel a scheduled message by id."""

from django.core.management.base import CommandError

from scheduling.core.caller import Caller
from scheduling.core.errors import ServiceError
from scheduling.management.commands._base import PlatformCommand, command_caller, command_team
from scheduling.messages.services import message_cancel


class Command(PlatformCommand):
    help = "Cancel a pending or published message: cancel_message MESSAGE_ID"

    def add_arguments(self, parser):
        parser.add_argument("message_id")
        parser.add_argument("--team", help="only if the message is this team's (else: no such message)")

    def handle(self, *args, message_id, team, **options):
        caller = command_caller(self)
        team = command_team(team)
        if team is not None:  # an operator acting for one team: as its admin would
            caller = Caller(name=caller.name, roles={team.pk: "admin"})
        try:
            message = message_cancel(message_id=message_id, caller=caller)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{message.id} {message.status}")
