"""Run the delay-accuracy report by hand: export + Spark job + load into AccuracyReport."""

from datetime import timedelta

from django.core.management.base import CommandError
from django.utils import timezone

from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._days import REPORT_ERRORS, day_range, one_line, parse_day
from scheduling.reports.services import accuracy_report_run


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = "Compute the delay-accuracy report of a day (default: yesterday, UTC) or of --since..--until"

    def add_arguments(self, parser):
        when = parser.add_mutually_exclusive_group()
        when.add_argument(
            "--date", metavar="DATE", help="the due date to report, YYYY-MM-DD (default: yesterday)"
        )
        when.add_argument("--since", metavar="DATE", help="first due date of a range (with --until)")
        parser.add_argument(
            "--until", metavar="DATE", help="last due date of the range, inclusive (default: --since)"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar during the export")

    def handle(self, *args, date, since, until, no_progress, **options):
        if until and not since:
            raise CommandError("--until needs --since")
        if since:
            first = parse_day(since, "--since")
            first, last = day_range(first, parse_day(until, "--until") if until else first)
        else:
            first = last = parse_day(date, "--date") if date else timezone.now().date() - timedelta(days=1)
        try:
            run = accuracy_report_run(first_day=first, last_day=last, progress=not no_progress)
        except REPORT_ERRORS as exc:
            raise CommandError(one_line(exc)) from None
        days = str(first) if first == last else f"{first}..{last}"
        self.stdout.write(
            f"accuracy report {days}: {run.facts + run.archived:,} messages ({run.facts:,} live, {run.archived:,} "
            f"archived) -> {run.report_rows:,} report rows"
        )
        for stage, seconds in (
            ("export", run.export_seconds),
            ("spark", run.spark_seconds),
            ("load", run.load_seconds),
            ("total", run.seconds),
        ):
            self.stdout.write(f"  {stage:<7}{seconds:8.1f} s")
