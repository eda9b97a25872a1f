"""A prune in a process of its own that SIGKILLs itself at a chosen point (tests of the prune's
crash safety): ``python -m tests.reliability.prune_child POINT``. The points wrap the prune's own
steps from outside; the platform's code has no hook for this."""

import os
import signal
import sys

import django


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(point: str) -> None:
    django.setup()
    # patched below: the modules themselves, not their functions, where each name is looked up when
    # called (the commits in archives.py, the batch in services.py, which imports it by name)
    import scheduling.retention.archives as archives
    import scheduling.retention.services as retention
    from scheduling.retention import parquet

    if point == "writing":  # the first file is written, not yet flushed, checked or renamed
        parquet._fsync_file = lambda path: die()
    elif point == "renamed":  # the first batch's files are in place, not yet listed; rows not deleted
        archives.archive_commit = lambda **kwargs: die()
    elif point == "deleted":  # listed and deleted, the COMMIT not sent
        commit = archives.archive_commit

        def commit_then_die(**kwargs):
            commit(**kwargs)
            die()

        archives.archive_commit = commit_then_die
    elif point == "committed":  # the first batch committed, the second not started
        prune_batch = retention.message_prune_batch
        calls = []

        def batch_then_die(**kwargs):
            if calls:
                die()
            calls.append(1)
            return prune_batch(**kwargs)

        retention.message_prune_batch = batch_then_die
    elif point == "audit-renamed":  # an audit batch's files in place, not yet listed; its rows not deleted
        archives.audit_archive_commit = lambda **kwargs: die()
    elif point == "audit-deleted":  # an audit batch listed and deleted, the COMMIT not sent
        audit_commit = archives.audit_archive_commit

        def audit_commit_then_die(**kwargs):
            audit_commit(**kwargs)
            die()

        archives.audit_archive_commit = audit_commit_then_die
    elif point != "none":
        raise SystemExit(f"unknown point {point!r}")
    result = retention.message_prune()
    print(f"skipped={result.skipped} archived={result.archived} deleted={result.deleted} "
          f"audit_archived={result.audit_archived}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
