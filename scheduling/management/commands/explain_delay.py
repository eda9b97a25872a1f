"""Print the path a delayed message takes through the cascade, as in the seeds' example; on a
sharded version, through the shard a message's id picks (--id), else shard 0."""

from decimal import Decimal, InvalidOperation

from django.core.management.base import CommandError
from django.db import DatabaseError

from scheduling.config.conf import conf, setting_name
from scheduling.endpoints.selectors import endpoint_get_named
from scheduling.management.commands._base import command_team
from scheduling.management.commands._versions import VersionedCommand, add_version_arguments, resolve_versions
from topology import cascade
from topology.explain import (
    describe_queues,
    describe_route,
    explain_rows,
    format_duration,
    headers,
    markdown_table,
)


class Command(VersionedCommand):
    help = "Show the exchanges, queues and TTLs a message with this delay passes through."

    def add_arguments(self, parser):
        parser.add_argument("seconds", help="delay in seconds, e.g. 10 or 2.5")
        parser.add_argument("destination", help="an endpoint's name, e.g. billing (or a queue's)")
        parser.add_argument("--team", help="the endpoint's team, where several teams have one of that name")
        add_version_arguments(parser, allow_all=False)
        parser.add_argument("--id", dest="message_id", metavar="UUID",
                            help=f"a message id: show the shard it travels on (versions with {setting_name('shards')})")

    def handle(self, *args, seconds, destination, team=None, message_id=None, **options):
        destination = self.queue_of(destination, team)
        try:
            delay = Decimal(seconds)
        except InvalidOperation:
            raise CommandError(f"SECONDS must be a number, got {seconds!r}") from None
        if not delay.is_finite():
            raise CommandError(f"SECONDS must be a finite number, got {seconds!r}")
        (version,) = resolve_versions(options)
        whole, remainder = int(delay // 1), delay - (delay // 1)
        shard = cascade.shard_of(message_id, version.shards)
        try:
            rows = explain_rows(version, whole, destination, shard)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(markdown_table(headers(version), rows))
        total = cascade.path_ttl_ms(cascade.path(version, whole, destination, shard))
        self.stdout.write(
            f"\n{version.name} ({version.levels} levels): {describe_route(version, whole, destination, shard)}; "
            f"time in queues {format_duration(total)}."
        )
        if version.shards > 1:
            if message_id is None:
                self.stdout.write(
                    f"{version.name} has {version.shards} shards; this is shard 0's path. Each message travels on "
                    f"the shard its id picks (its UUID modulo {version.shards}): give --id <uuid> to see a message's."
                )
            else:
                self.stdout.write(f"{version.name} has {version.shards} shards: message {message_id} travels on "
                                  f"shard {shard}.")
            self.stdout.write(f"On shard {shard} it {describe_queues(version, whole, destination, shard)}.")
        elif message_id is not None:
            self.stdout.write(f"{version.name} has one shard: message {message_id} travels on it.")
        if remainder:
            self.stdout.write(
                f"The remaining {remainder}s is held by the consumer until the exact due time."
            )
        if version.envelopes and conf().envelopes:
            self.stdout.write(
                f"Envelopes ({setting_name('envelopes')} on): messages to {destination} that the relay publishes "
                f"together and that fall due in the same second take this path as one broker message; the "
                f"consumer holds each to its own due time. An event's messages (one per subscription) take it as "
                f"one broker message for the whole event, to {cascade.FANOUT_QUEUE}, fanned out to each endpoint "
                f"the arrival margin before due (docs/concepts/fan-out.md)."
            )

    def queue_of(self, destination: str, team: str | None) -> str:
        """An endpoint's queue (its name, or an exact queue, travels in the routing key): the
        endpoint of that name in ``--team``, or in the one team that has one; else the text as a
        queue's name."""
        try:
            named = endpoint_get_named(name=destination, team=command_team(team).name if team else None)
        except DatabaseError:  # no database (yet): the path of a queue of that name
            if team:
                raise
            return destination
        if team and not named:
            raise CommandError(f"team {team} has no endpoint {destination!r}")
        if len(named) > 1:
            raise CommandError(f"several teams have an endpoint {destination!r} "
                               f"({', '.join(e.team.name for e in named)}): give --team")
        if named:
            self.stdout.write(f"Endpoint {destination} of team {named[0].team.name}: queue {named[0].queue}\n")
            return named[0].queue
        return destination
