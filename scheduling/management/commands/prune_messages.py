"""Archive, then delete, the finished messages past their retention (beat runs it hourly)."""

from django.core.management.base import CommandError

from ...conf import conf, setting_name
from ...durations import format_duration
from ...services.retention import PruneError, message_prune
from ._base import PlatformCommand
from ._progress import progress_bar


def size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000 or unit == "GB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")


class Command(PlatformCommand):
    help = (f"Archive finished messages past {setting_name('retention')} (failed: {setting_name('failed_retention')}) "
            f"to Parquet in {setting_name('archive_dir')}, then delete them; --dry-run counts them")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, dry_run, no_progress, **options):
        settings = conf()
        rules = (f"delivered and cancelled after {format_duration(settings.retention)}, "
                 f"failed after {format_duration(settings.failed_retention)}")
        try:
            if dry_run or no_progress:
                result = message_prune(dry_run=dry_run)
            else:
                with progress_bar(self.stderr, "pruning messages", None) as update:
                    result = message_prune(progress=lambda done, total: update(done, of=total))
        except PruneError as exc:
            raise CommandError(str(exc)) from None
        if result.skipped:
            self.stdout.write("another prune is running (it holds the prune lock): nothing done")
            return
        kept = f"{result.kept_in_flight:,} pending or published messages older than that (never pruned)"
        if dry_run:
            self.stdout.write(f"dry run ({rules}): {result.candidates:,} finished messages would be archived to "
                              f"{settings.archive_dir} and deleted, freeing ≈ {size(result.reusable_bytes or 0)} "
                              f"of the table for new rows; {kept}")
            return
        self.stdout.write(f"pruned finished messages ({rules}) in {result.seconds:.1f} s")
        self.stdout.write(f"  archived   {result.archived:>12,} messages in {result.files:,} file(s), "
                          f"{size(result.archive_bytes)}, to {settings.archive_dir}")
        self.stdout.write(f"  deleted    {result.deleted:>12,} rows")
        self.stdout.write(f"  kept       {kept}")
        reusable = "unknown" if result.reusable_bytes is None else f"≈ {size(result.reusable_bytes)}"
        when = ("now: the prune vacuumed it, as the server's autovacuum is off for it" if result.vacuumed
                else "once autovacuum has passed")
        self.stdout.write(f"  space      {reusable} of the table (with its indexes) reused for new rows {when}; "
                          "its files do not shrink")
        if result.orphans_removed or result.archive_days_removed or result.report_rows_removed:
            self.stdout.write(f"  removed    {result.orphans_removed:,} file(s) of interrupted runs, "
                              f"{result.archive_days_removed:,} archive day(s) and {result.report_rows_removed:,} "
                              f"accuracy report row(s) past {setting_name('archive_retention')}")
