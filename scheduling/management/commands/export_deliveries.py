"""Export ScheduledMessage facts to Parquet, one partition per due date (re-runs replace days)."""

from pathlib import Path

from django.core.management.base import CommandError
from django.utils import timezone

from scheduling.management.commands._base import PlatformCommand, command_team
from scheduling.management.commands._days import REPORT_ERRORS, day_range, one_line, parse_day
from scheduling.reports.export import deliveries_export


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = ("Export delivery facts to Parquet per due date (every team's, or --team NAME's): "
            "--since 2026-11-20 [--until DATE] --out DIR")

    def add_arguments(self, parser):
        parser.add_argument("--since", required=True, metavar="DATE", help="first due date (UTC), YYYY-MM-DD")
        parser.add_argument("--until", metavar="DATE", help="last due date, inclusive (default: today, UTC)")
        parser.add_argument(
            "--out", required=True, metavar="DIR", help="directory of due_date=... partitions"
        )
        parser.add_argument("--team", metavar="NAME", help="one team's messages only (default: every team's)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, since, until, out, team, no_progress, **options):
        first, last = day_range(
            parse_day(since, "--since"), parse_day(until, "--until") if until else timezone.now().date()
        )
        one_team = command_team(team)
        try:
            result = deliveries_export(
                first_day=first, last_day=last, out_dir=Path(out), progress=not no_progress,
                team_id=one_team.pk if one_team else None,
            )
        except REPORT_ERRORS as exc:
            raise CommandError(one_line(exc)) from None
        for day, rows in result.rows_by_day.items():
            self.stdout.write(f"{day}  {rows:>12,} rows")
        of_team = f" of team {one_team}" if one_team else ""
        self.stdout.write(
            f"exported {result.rows:,} rows{of_team} for {len(result.rows_by_day)} day(s) to {result.out_dir}"
        )
