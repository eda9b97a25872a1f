"""Make (or rotate) a team's own RabbitMQ user, whose permissions reach only the team's queues
and its workers' own remote-control and event resources: the AMQP URL its workers connect with is
printed alone on the last line (``URL=$(... | tail -1)``) and never shown again."""

from django.core.management.base import CommandError

from rabbit import BrokerError
from scheduling.core.errors import ServiceError
from scheduling.management.commands._base import PlatformCommand, command_team
from scheduling.teams.broker_access import worker_settings
from scheduling.teams.broker_users import team_broker_user_ensure


class Command(PlatformCommand):
    help = ("Make a team's RabbitMQ user for its Celery workers (or --rotate its password); "
            "the AMQP URL is the last line, shown once")

    def add_arguments(self, parser):
        parser.add_argument("team", help="the team's name")
        parser.add_argument("--rotate", action="store_true",
                            help="give the team's existing user a new password (and its permissions again)")

    def handle(self, *args, team, rotate, **options):
        found = command_team(team)
        try:
            made = team_broker_user_ensure(team=found, rotate=rotate)
        except (ServiceError, BrokerError) as exc:
            raise CommandError(str(exc)) from None
        settings = ", ".join(f"{k}={v!r}" for k, v in worker_settings(found.name).items())
        self.stdout.write(f"broker user {made.user} {'rotated' if made.rotated else 'made'} for team {found.name}; "
                          f"its workers set the Celery settings {settings} "
                          "(delayclient.celery.team_worker_settings); the URL, shown once:")
        self.stdout.write(made.url)
