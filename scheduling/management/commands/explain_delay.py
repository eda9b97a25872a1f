"""Print the path a delayed message takes through the cascade, as in the seeds' example."""

from decimal import Decimal, InvalidOperation

from django.core.management.base import CommandError

from topology import cascade
from topology.explain import describe_route, explain_rows, format_duration, headers, markdown_table

from ._versions import VersionedCommand, add_version_arguments, resolve_versions


class Command(VersionedCommand):
    help = "Show the exchanges, queues and TTLs a message with this delay passes through."

    def add_arguments(self, parser):
        parser.add_argument("seconds", help="delay in seconds, e.g. 10 or 2.5")
        parser.add_argument("destination", help="endpoint (queue) name, e.g. billing")
        add_version_arguments(parser, allow_all=False)

    def handle(self, *args, seconds, destination, **options):
        try:
            delay = Decimal(seconds)
        except InvalidOperation:
            raise CommandError(f"SECONDS must be a number, got {seconds!r}") from None
        if not delay.is_finite():
            raise CommandError(f"SECONDS must be a finite number, got {seconds!r}")
        (version,) = resolve_versions(options)
        whole, remainder = int(delay // 1), delay - (delay // 1)
        try:
            rows = explain_rows(version, whole, destination)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(markdown_table(headers(version), rows))
        total = cascade.path_ttl_ms(cascade.path(version, whole, destination))
        self.stdout.write(
            f"\n{version.name} ({version.levels} levels): {describe_route(version, whole, destination)}; "
            f"time in queues {format_duration(total)}."
        )
        if remainder:
            self.stdout.write(
                f"The remaining {remainder}s is held by the consumer until the exact due time."
            )
