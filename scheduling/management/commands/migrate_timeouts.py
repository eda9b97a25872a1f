"""Move waiting timeouts from the database-backed timeout manager into the native cascade."""

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from rabbit import BrokerError
from scheduling.core.errors import ServiceError
from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._progress import progress_bar
from scheduling.management.commands._versions import add_move_arguments
from scheduling.moves.timeouts import timeout_migrate
from scheduling.versions.selectors import topology_version_get


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = (
        "Switch timeout-manager endpoints to a native version and move their pending timeouts due "
        "at or after the cutoff: migrate_timeouts --to v2 [--cutoff 2026-11-21T12:00:00Z] [--dry-run]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--to", dest="target", required=True, help="native version, e.g. v2")
        parser.add_argument("--cutoff", help="move timeouts due at or after this ISO time (default: now); "
                                             "earlier ones stay with the timeout manager")
        add_move_arguments(parser, batch=False)

    def handle(self, *args, target, cutoff, dry_run, **options):
        version = topology_version_get(name=target)
        if version is None:
            raise CommandError(f"unknown topology version {target!r}")
        at = timezone.now()
        if cutoff:
            at = parse_datetime(cutoff)
            if at is None or timezone.is_naive(at):
                raise CommandError(f"--cutoff must be an ISO time with a timezone, got {cutoff!r}")
        try:
            with progress_bar(self.stdout, f"timeouts -> {version.name}", None) as update:
                result = timeout_migrate(
                    to=version, cutoff=at, dry_run=dry_run,
                    progress=lambda r: update(r.moved, f"published {r.published}"),
                )
        except (ServiceError, ValidationError, BrokerError) as exc:
            raise CommandError(f"migrate_timeouts stopped: {exc}") from None
        if dry_run:
            self.stdout.write(
                f"Dry run: {result.endpoints} endpoint(s) would switch to {version.name}; {result.to_move} "
                f"timeout(s) would move, {result.before_cutoff} due before the cutoff stay. Nothing was changed."
            )
            return
        self.stdout.write(
            f"Switched {result.endpoints} endpoint(s) to {version.name}; moved {result.moved} timeout(s) "
            f"({result.published} published now, the rest by the sweeper); {result.before_cutoff} due before "
            f"the cutoff stay with the timeout manager."
        )
