"""Schedule one message from the command line (stored even when the broker is down)."""

import json

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.utils.dateparse import parse_datetime

from scheduling.management.commands._base import PlatformCommand, command_team
from scheduling.messages.services import message_schedule


class Command(PlatformCommand):
    help = "Schedule a message: schedule_message ENDPOINT --delay 10.5 --payload '{\"order\": 42}'"

    def add_arguments(self, parser):
        parser.add_argument("endpoint")
        parser.add_argument("--team", help="the endpoint's team (needed when several teams have one of that name)")
        when = parser.add_mutually_exclusive_group(required=True)
        when.add_argument("--delay", help="seconds from now, fractions allowed")
        when.add_argument("--deliver-at", help="ISO time with timezone, e.g. 2026-11-21T12:00:00.250Z")
        parser.add_argument("--payload", default="{}", help="JSON (default {})")
        parser.add_argument("--idempotency-key")
        expiry = parser.add_mutually_exclusive_group()
        expiry.add_argument("--expires-at", help="ISO time with timezone after the due time: never handed over "
                                                 "from then on (it ends expired)")
        expiry.add_argument("--expire-after", help="seconds after the due time from which it is never handed over")

    def handle(self, *args, endpoint, team, delay, deliver_at, payload, idempotency_key, expires_at=None,
               expire_after=None, **options):
        team = command_team(team)
        try:
            data = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--payload is not JSON: {exc}") from None
        at = _time(deliver_at, "--deliver-at")
        expires = _time(expires_at, "--expires-at")
        try:
            message = message_schedule(
                endpoint=endpoint, payload=data, delay=delay, deliver_at=at, idempotency_key=idempotency_key,
                team=team.name if team else None, expires_at=expires, expire_after_seconds=expire_after,
            )
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
            ) from None
        self.stdout.write(f"{message.id} {message.status} due {message.due_at.isoformat()}")


def _time(text: str | None, option: str):
    if not text:
        return None
    at = parse_datetime(text)
    if at is None:
        raise CommandError(f"{option} is not an ISO date-time: {text!r}")
    return at
