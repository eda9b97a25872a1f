"""Archive, then delete, the finished messages past their retention and the audit log's rows past
theirs, and delete the orphan copies past theirs (beat runs it hourly)."""

from contextlib import ExitStack

from django.core.management.base import CommandError

from scheduling.config.conf import conf, setting_name
from scheduling.core.durations import format_duration
from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._progress import progress_bar
from scheduling.retention import audit_columns
from scheduling.retention.archives import PruneError
from scheduling.retention.services import message_prune


def size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000 or unit == "GB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = (f"Archive finished messages past {setting_name('retention')} (failed: {setting_name('failed_retention')}) "
            f"and the audit log's rows past {setting_name('audit_retention')} to Parquet in "
            f"{setting_name('archive_dir')}, then delete them, and delete the orphan copies not seen for "
            f"{setting_name('orphan_copy_retention')}; --dry-run counts them")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, dry_run, no_progress, **options):
        settings = conf()
        rules = (f"delivered and cancelled after {format_duration(settings.retention)}, "
                 f"failed after {format_duration(settings.failed_retention)}")
        audit_rule = f"changes older than {format_duration(settings.audit_retention)}"
        audit_dir = settings.archive_dir / audit_columns.DIRECTORY
        orphan_rule = f"not seen for {format_duration(settings.orphan_copy_retention)}"
        event_rule = (f"no message left, older than "
                      f"{format_duration(max(settings.retention, settings.failed_retention))}")
        try:
            if dry_run or no_progress:
                result = message_prune(dry_run=dry_run)
            else:
                with _Bars(self.stderr) as bars:
                    result = message_prune(progress=bars.updater("pruning messages"),
                                           audit_progress=bars.updater("pruning the audit log"),
                                           orphan_progress=bars.updater("pruning orphan copies"),
                                           event_progress=bars.updater("pruning events"))
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
            self.stdout.write(f"dry run (audit log, {audit_rule}): {result.audit_candidates:,} rows would be "
                              f"archived to {audit_dir} and deleted")
            self.stdout.write(f"dry run (orphan copies, {orphan_rule}): {result.orphan_copy_candidates:,} would be "
                              "deleted (not archived)")
            self.stdout.write(f"dry run (events, {event_rule}): {result.event_candidates:,} would be deleted "
                              "(not archived)")
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
        self.stdout.write(f"  audit log  {result.audit_archived:>12,} rows ({audit_rule}) archived in "
                          f"{result.audit_files:,} file(s), {size(result.audit_archive_bytes)}, to {audit_dir}; "
                          f"{result.audit_deleted:,} deleted")
        self.stdout.write(f"  orphans    {result.orphan_copies_deleted:>12,} orphan copies ({orphan_rule}) deleted, "
                          "not archived")
        self.stdout.write(f"  events     {result.events_deleted:>12,} events ({event_rule}) deleted, not archived")
        if (result.orphans_removed or result.archive_days_removed or result.audit_days_removed
                or result.report_rows_removed):
            self.stdout.write(f"  removed    {result.orphans_removed:,} file(s) of interrupted runs, "
                              f"{result.archive_days_removed:,} archive day(s), {result.audit_days_removed:,} "
                              f"audit archive day(s) and {result.report_rows_removed:,} accuracy report row(s) "
                              f"past {setting_name('archive_retention')}")


class _Bars:
    """One progress bar at a time (a terminal shows one), opened as the prune reports each part:
    the messages', then the audit log's."""

    def __init__(self, stream):
        self.stream, self.stack, self.current, self.update = stream, ExitStack(), None, None

    def updater(self, description: str):
        def update(done: int, total: int) -> None:
            if self.current != description:
                self.stack.close()
                self.update = self.stack.enter_context(progress_bar(self.stream, description, None))
                self.current = description
            self.update(done, of=total)

        return update

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()
