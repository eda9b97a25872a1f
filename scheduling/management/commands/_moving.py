"""Shared by migrate_delays and transfer_delays: run a move with a progress bar, summarise it."""

import time

from django.core.management.base import CommandError

from rabbit import BrokerError
from scheduling.management.commands._progress import progress_bar
from scheduling.moves.delays import MoveSummary, delays_move
from scheduling.versions.broker import topology_count


def run_move(command, *, source, target, source_version, target_version, target_row, batch, dry_run, label):
    """source and target are rabbit.Brokers (the same one to migrate between versions)."""
    started = time.monotonic()
    try:
        total = topology_count(version=source_version, on=source)
        with progress_bar(command.stdout, label, total) as update:
            summary = delays_move(
                source=source, target=target, source_version=source_version, target_version=target_version,
                target_row=target_row, batch=batch, dry_run=dry_run,
                progress=lambda s: update(s.found, f"moved {s.moved} poisoned {s.poisoned} dropped {s.dropped}"),
            )
    except (BrokerError, RuntimeError, OSError) as exc:
        raise CommandError(f"{label} stopped: {exc}; nothing unconfirmed was acked, run it again") from None
    report(command, summary, time.monotonic() - started, dry_run, source_version)
    return summary


def report(command, s: MoveSummary, seconds: float, dry_run: bool, source_version) -> None:
    if dry_run:
        levels = ", ".join(f"L{level:02d}: {n}" for level, n in sorted(s.per_level.items(), reverse=True))
        command.stdout.write(
            f"Dry run: {s.found} delayed message(s) in {source_version.name} ({levels or 'all levels empty'}): "
            f"{s.moved} would move ({s.immediate} straight to delivery), {s.poisoned} to the poison queue, "
            f"{s.dropped} stale copies would be dropped. Nothing was moved."
        )
        return
    rate = s.found / seconds if seconds > 0 else 0
    command.stdout.write(
        f"Moved {s.moved} ({s.immediate} delivered immediately), poisoned {s.poisoned}, dropped {s.dropped} "
        f"stale, failed {s.failed}; {s.rows_updated} rows updated; {s.found} messages in {seconds:.1f} s "
        f"({rate:.0f}/s). {source_version.name} level queues now hold {s.left_in_source} message(s)."
    )
    if s.failed or s.left_in_source:
        raise CommandError("not everything was moved; run the command again")
