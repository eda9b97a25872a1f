"""Every migration the previous release does not have is expand-only on the tables that grow with
traffic (the messages, their attempts, the audit log): while it runs and after, the previous
release keeps serving, and no statement holds such a table for longer than a moment.

Read from each migration's SQL (``sqlmigrate``), by the rules below; docs/operations/upgrades.md
explains them. The previous release is the commit pyproject.toml names; its migrations are the
ones in that commit's tree (git). A migration that needs one of these anyway belongs in a contract
release, after the release that stopped needing the old shape: make it pass by saying so here."""

import io
import re
import subprocess
import tomllib

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from harness.paths import ROOT

GROWING = ("scheduling_scheduledmessage", "scheduling_messageattempt", "scheduling_auditevent")
VOLATILE = r"(random|clock_timestamp|timeofday|gen_random_uuid|uuid_generate_v[14]|nextval)\s*\("
# (pattern on a statement that alters or indexes a growing table, why it is refused)
RULES = (
    (r"\bALTER COLUMN \S+ (SET DATA )?TYPE\b", "changes a column's type: rewrites the table under ACCESS EXCLUSIVE"),
    (r"\bSET NOT NULL\b", "SET NOT NULL reads every row under ACCESS EXCLUSIVE (add a CHECK … NOT VALID, "
                          "VALIDATE it, then SET NOT NULL in a later release)"),
    (r"\bADD COLUMN\b(?!.*\bDEFAULT\b).*\bNOT NULL\b", "a NOT NULL column without a default: the previous "
                                                        "release's INSERTs fail (nullable, or db_default)"),
    (rf"\bADD COLUMN\b.*\bDEFAULT\s+\(?\s*{VOLATILE}", "a volatile default is written into every row: a rewrite "
                                                       "under ACCESS EXCLUSIVE"),
    (r"\bADD COLUMN\b.*\b(CHECK|REFERENCES)\b", "a constraint added with the column reads every row under "
                                                "ACCESS EXCLUSIVE (a plain column; a constraint NOT VALID)"),
    (r"\bADD CONSTRAINT\b(?!.*\bNOT VALID\b)(?!.*\bUSING INDEX\b)", "a constraint checked at once reads every "
                                                                    "row while it locks (NOT VALID, then VALIDATE)"),
    (r"\bCREATE (UNIQUE )?INDEX (?!CONCURRENTLY\b)", "an index built without CONCURRENTLY blocks every write "
                                                     "while it builds (AddIndexConcurrently)"),
    (r"\bRENAME\b", "a rename: the previous release still uses the old name"),
    (r"\bDROP TABLE\b", "drops a table the previous release uses"),
)


def statements(sql: str) -> list[str]:
    """The SQL statements of sqlmigrate's output, each on one line, comments left out."""
    text = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [" ".join(part.split()) for part in text.split(";") if part.strip() and part.strip() not in ("BEGIN", "COMMIT")]


def on_growing_table(statement: str) -> str | None:
    for table in GROWING:
        if re.search(rf'\b(ALTER TABLE|ON|DROP TABLE( IF EXISTS)?)\s+"?{table}"?(\s|$)', statement, re.I):
            return table
    return None


def violations(sql: str, previous_columns: dict[str, set[str]]) -> list[str]:
    """What in ``sql`` breaks the rules: one line each, the statement and why. ``previous_columns``:
    the columns of each growing table the previous release reads (dropping one breaks it)."""
    found = []
    for statement in statements(sql):
        table = on_growing_table(statement)
        if table is None:
            continue
        for pattern, why in RULES:
            if re.search(pattern, statement, re.I):
                found.append(f"{statement[:160]}: {why}")
        for column in re.findall(r'\bDROP COLUMN (?:IF EXISTS )?"?(\w+)"?', statement, re.I):
            if column in previous_columns.get(table, set()):
                found.append(f"{statement[:160]}: drops {column}, which the previous release reads (drop it in "
                             f"the release after the one that stopped reading it)")
    return found


def previous_release() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["delayplatform"]["previous-release"]["commit"]


def previous_migrations(commit: str) -> set[str]:
    listed = subprocess.run(["git", "ls-tree", "--name-only", commit, "scheduling/migrations/"], cwd=ROOT,
                            capture_output=True, text=True)
    assert listed.returncode == 0, (f"the previous release {commit} is not in this clone ({listed.stderr.strip()}): "
                                    f"git fetch --unshallow")
    return {path.rsplit("/", 1)[1].removesuffix(".py") for path in listed.stdout.split()
            if re.fullmatch(r"\d{4}_\w+\.py", path.rsplit("/", 1)[1])}


def sql_of(name: str) -> str:
    out = io.StringIO()
    call_command("sqlmigrate", "scheduling", name, stdout=out)
    return out.getvalue()


def columns_at(loader: MigrationLoader, migration: str) -> dict[str, set[str]]:
    """The columns of each growing table once ``migration`` is applied: what that release reads."""
    state = loader.project_state(("scheduling", migration))
    found = {}
    for model in state.apps.get_models():
        if model._meta.db_table in GROWING:
            found[model._meta.db_table] = {field.column for field in model._meta.concrete_fields}
    return found


@pytest.fixture(scope="module")
def loader(django_db_blocker):
    with django_db_blocker.unblock():
        return MigrationLoader(connection)


@pytest.fixture(scope="module")
def sql(django_db_blocker, django_db_setup):
    """name -> its SQL, read outside any test's transaction (a concurrent index refuses to be
    written inside one)."""
    with django_db_blocker.unblock():
        return {name: sql_of(name) for app, name in MigrationLoader(connection).disk_migrations if app == "scheduling"
                and name >= "0023"}


def test_every_migration_since_the_previous_release_is_expand_only(loader, sql):
    previous = previous_migrations(previous_release())
    assert "0025_invitations_and_key_parents" in previous  # the release of 2026-11-28 (12c5d34) or later
    ours = sorted(name for app, name in loader.disk_migrations if app == "scheduling")
    assert previous <= set(ours), f"the previous release has migrations this tree lacks: {previous - set(ours)}"
    new = [name for name in ours if name not in previous]
    before = columns_at(loader, max(previous))
    found = {name: violations(sql[name], before) for name in new}
    assert not {name: lines for name, lines in found.items() if lines}, found
    print(f"\n{len(new)} migration(s) since the previous release, each expand-only: {', '.join(new) or '-'}")


def test_the_expand_migrations_of_the_last_release_pass_the_rules(loader, sql):
    """0023 (a nullable column), 0024 (nullable columns, db_default, an index built concurrently)
    and 0025 (a new table, a column without a foreign-key constraint): each what the rules allow."""
    for name, previous in (("0023_captured_task", "0022_webhook_engine"),
                           ("0024_quotas_on_every_path", "0023_captured_task"),
                           ("0025_invitations_and_key_parents", "0024_quotas_on_every_path")):
        assert violations(sql[name], columns_at(loader, previous)) == [], name


M = '"scheduling_scheduledmessage"'
REFUSED = [
    f'ALTER TABLE {M} ALTER COLUMN "status" TYPE varchar(32) USING "status"::varchar(32);',
    f'ALTER TABLE {M} ALTER COLUMN "captured_task" SET NOT NULL;',
    f'ALTER TABLE {M} ADD COLUMN "weight" integer NOT NULL;',
    f'ALTER TABLE {M} ADD COLUMN "nonce" uuid DEFAULT (gen_random_uuid()) NOT NULL;',
    f'ALTER TABLE {M} ADD COLUMN "size" integer NULL CHECK ("size" >= 0);',
    f'ALTER TABLE {M} ADD CONSTRAINT "m_size" CHECK ("payload_bytes" >= 0);',
    f'ALTER TABLE {M} ADD CONSTRAINT "m_fk" FOREIGN KEY ("team_id") REFERENCES "scheduling_team" ("id") '
    "DEFERRABLE INITIALLY DEFERRED;",
    f'CREATE INDEX "m_due" ON {M} ("due_at");',
    f'CREATE UNIQUE INDEX "m_key" ON {M} ("idempotency_key");',
    f'ALTER TABLE {M} RENAME COLUMN "payload" TO "body";',
    f'ALTER TABLE {M} RENAME TO "scheduling_message";',
    f'ALTER TABLE {M} DROP COLUMN "payload" CASCADE;',
    f"DROP TABLE {M} CASCADE;",
    'ALTER TABLE "scheduling_messageattempt" ALTER COLUMN "excerpt" TYPE text;',
]
ALLOWED = [
    f'ALTER TABLE {M} ADD COLUMN "traceparent" varchar(55) NULL;',
    f'ALTER TABLE {M} ADD COLUMN "hops" integer DEFAULT 0 NOT NULL;',
    f'ALTER TABLE {M} ADD COLUMN "seen_at" timestamp with time zone DEFAULT (STATEMENT_TIMESTAMP()) NOT NULL;',
    f'ALTER TABLE {M} ADD CONSTRAINT "m_size" CHECK ("payload_bytes" >= 0) NOT VALID;',
    f'ALTER TABLE {M} VALIDATE CONSTRAINT "m_size";',
    f'CREATE INDEX CONCURRENTLY "m_due" ON {M} ("due_at");',
    f'ALTER TABLE {M} ALTER COLUMN "captured_task" DROP NOT NULL;',
    f'ALTER TABLE {M} DROP COLUMN "retired";',  # a column the previous release no longer reads
    'ALTER TABLE "scheduling_endpoint" RENAME COLUMN "queue" TO "queue_name";',  # not a growing table
    'CREATE INDEX "e_name" ON "scheduling_endpoint" ("name");',
]


@pytest.mark.parametrize("sql", REFUSED)
def test_the_rules_refuse_what_rewrites_locks_or_breaks_the_previous_release(sql):
    assert len(violations(sql, {"scheduling_scheduledmessage": {"payload", "status"}})) >= 1


@pytest.mark.parametrize("sql", ALLOWED)
def test_the_rules_allow_the_expand_steps(sql):
    assert violations(sql, {"scheduling_scheduledmessage": {"payload", "status"}}) == []
