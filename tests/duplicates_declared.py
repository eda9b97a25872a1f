"""The repeats the ``duplicates`` command may list across files that are declared boilerplate:
kept on purpose, each kind with the reason. The command has no way to be told (it marks thin shapes
itself and reads no configuration), so the declaration is this file: a row the command lists that
no pair of globs here covers is a repeat to remove (docs/architecture.md, "Tests mirror the code").
tests/test_layout.py checks that every glob still names a file.

Each entry: (glob of one side, glob of the other side, why the repeat stays).
"""

DECLARED: list[tuple[str, str, str]] = [
    ("scheduling/migrations/*.py", "scheduling/migrations/*.py",
     "written by makemigrations and frozen once released: a released migration is history, and "
     "its operations (AddField, RunSQL CONCURRENTLY, ...) are alike by nature"),
    ("harness/testapp/migrations/*.py", "scheduling/migrations/*.py",
     "written by makemigrations: the test app's first migration has the shape of the platform's"),
    ("clients/python/*", "scheduling/*",
     "the client (delayclient) is installed apart and imports nothing of the platform: its errors, "
     "CLI output and Celery headers mirror the platform's wire on purpose"),
    ("clients/python/tests/*", "tests/*",
     "the client's own suite runs without the platform's tests package: starting an external Celery "
     "worker is spelled in each"),
    ("scheduling/observability/metrics.py", "scheduling/observability/webhook_metrics.py",
     "metric declarations (name, help, labels, buckets): a table, one Counter/Histogram per metric"),
    ("scheduling/api/serializers.py", "scheduling/api/team_serializers.py",
     "serializer field declarations: a table of a response's fields"),
    ("scheduling/management/commands/migrate_delays.py", "scheduling/management/commands/migrate_timeouts.py",
     "argument declarations of two thin commands (--to, --dry-run, the audit flag); the moving is "
     "shared already (commands/_versions.py, moves/delays.py)"),
    ("tests/scheduling/messages/test_bulk.py", "tests/scheduling/schedules/test_services.py",
     "a test module's opening: the services it tests imported one a line, the database mark, the "
     "Status alias and a unit of time; nothing to share but names"),
    ("tests/scheduling/events/test_services.py", "tests/scheduling/messages/test_services.py",
     "a test module's opening, as above: the services imported one a line, the models, the database "
     "mark and the Status alias"),
]
