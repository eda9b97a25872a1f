"""After PostgreSQL is restored from a backup: publish again the rows in flight whose copies the
broker no longer holds, report the copies with no row set aside, export them for the operator
(docs/operations/backup-and-restore.md, the runbook)."""

import json
from datetime import datetime

from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.dateparse import parse_datetime

import rabbit
from scheduling.core.durations import format_duration, parse_duration
from scheduling.delivery.selectors import orphan_copy_list
from scheduling.management.commands._base import PlatformCommand, command_team
from scheduling.management.commands._progress import progress_bar
from scheduling.moves.restore import BATCH, message_reconcile_after_restore

DEFAULT_OVERDUE_AFTER = "60s"


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    when = parse_datetime(value)
    if when is None or when.tzinfo is None:
        raise CommandError(f"--orphans-since must be an ISO time with its offset, e.g. 2026-11-28T23:00:00Z, "
                           f"not {value!r}")
    return when


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = ("After PostgreSQL was restored from a backup: publish again every row still published more than "
            "--overdue-after past its due time (its copy was consumed after the backup), report the copies "
            "with no row set aside (the messages scheduled after the backup); --dry-run counts only")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count and report; publish nothing")
        parser.add_argument("--overdue-after", default=DEFAULT_OVERDUE_AFTER, metavar="DURATION",
                            help=f"a published row this long past its due time has no copy coming "
                                 f"(default {DEFAULT_OVERDUE_AFTER}; 90s, 15m, ...)")
        parser.add_argument("--compare-broker", action="store_true",
                            help="also count the messages the broker holds in the cascade and endpoint queues "
                                 "(management API)")
        parser.add_argument("--export-orphans", metavar="FILE",
                            help="write the copies set aside with no row, one JSON object a line ('-': stdout)")
        parser.add_argument("--orphans-since", metavar="TIME",
                            help="count and export only the copies seen since then (e.g. the restore's time)")
        parser.add_argument("--team", help="export only the copies of this team's queues")
        parser.add_argument("--batch", type=int, default=BATCH, help=f"rows a transaction (default {BATCH})")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, dry_run, overdue_after, compare_broker, export_orphans, orphans_since, team, batch,
               no_progress, **options):
        try:
            overdue = parse_duration(overdue_after, name="--overdue-after")
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if batch < 1:
            raise CommandError(f"--batch must be 1 or more, not {batch}")
        since, team = _since(orphans_since), command_team(team)
        # a path that cannot be written is refused before anything is done
        stream = self._open(export_orphans) if export_orphans else None
        result = None
        try:
            if dry_run or no_progress:
                result = message_reconcile_after_restore(overdue_after=overdue, dry_run=dry_run, batch=batch,
                                                         orphans_since=since, compare_broker=compare_broker)
            else:
                with progress_bar(self.stderr, "publishing overdue rows again", None) as update:
                    result = message_reconcile_after_restore(
                        overdue_after=overdue, batch=batch, orphans_since=since, compare_broker=compare_broker,
                        progress=lambda done, total: update(done, of=total))
        except rabbit.BrokerUnavailable as exc:
            raise CommandError(f"the broker is unavailable: {exc}") from None
        finally:
            if stream is not None and export_orphans != "-" and result is None:
                stream.close()
        self._report(result, dry_run, format_duration(overdue))
        if stream is not None:
            self._export(stream, export_orphans, since, team)

    def _open(self, path: str):
        if path == "-":
            return self.stdout
        try:
            return open(path, "w", encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None

    def _report(self, result, dry_run: bool, overdue: str) -> None:
        out = self.stdout.write
        out(f"{'dry run: ' if dry_run else ''}reconciled the broker with the restored database in "
            f"{result.seconds:.1f} s")
        oldest = f" (the oldest due {result.oldest_due.isoformat()})" if result.oldest_due else ""
        out(f"  overdue      {result.overdue:>10,} rows published more than {overdue} past their due time{oldest}: "
            f"their copies were consumed after the backup")
        if dry_run:
            out(f"               {'':>10} would be published again (they arrive a second time where they had "
                f"been delivered)")
        else:
            out(f"  republished  {result.republished:>10,} (broker confirmed); {result.unconfirmed:,} not confirmed, "
                f"{result.unbuildable:,} unbuildable (failed, with the reason), {result.skipped:,} left to a "
                f"delivery in progress")
        out(f"  waiting      {result.waiting:>10,} rows published, not yet overdue: their copies are in the cascade")
        out(f"  pending      {result.pending:>10,} rows the relay publishes (its sweeper)")
        out(f"  orphans      {result.orphans:>10,} copies with no row set aside so far (scheduled after the "
            f"backup): the admin's Orphan copies, --export-orphans")
        if result.broker_messages is not None:
            out(f"  broker       {result.broker_messages:>10,} messages in the cascade and endpoint queues (an "
                f"envelope counts once; copies with no row included)")
        elif result.broker_problem:
            out(f"  broker       not read: {result.broker_problem}")
        if not dry_run and result.unconfirmed:
            out("run it again: the rows not confirmed are still overdue")

    def _export(self, stream, path: str, since, team) -> None:
        written = 0
        try:
            for row in orphan_copy_list(since=since, team_id=team.pk if team else None):
                stream.write(json.dumps(row, cls=DjangoJSONEncoder, ensure_ascii=False) + ("" if path == "-" else "\n"))
                written += 1
        finally:
            if path != "-":
                stream.close()
        if path != "-":
            self.stdout.write(f"exported {written:,} orphan cop{'y' if written == 1 else 'ies'} to {path}")
