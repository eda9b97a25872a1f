"""Cancel a scheduled message by id."""

from django.core.management.base import CommandError

from ...errors import ServiceError
from ...services.messages import message_cancel
from ._base import PlatformCommand


class Command(PlatformCommand):
    help = "Cancel a pending or published message: cancel_message MESSAGE_ID"

    def add_arguments(self, parser):
        parser.add_argument("message_id")

    def handle(self, *args, message_id, **options):
        try:
            message = message_cancel(message_id=message_id)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{message.id} {message.status}")
