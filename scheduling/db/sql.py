"""SQL helpers any domain's raw statements share: arrays of ids as literals, a locked batch kept
server-side, prepared statements, a row loaded as an instance. Generic: they name no model (the
models import them), so every layer above may use them."""

from __future__ import annotations

import re

from django.db import connection
from django.db.models.base import ModelState

# A batch of rows locked for the prune, kept server-side for its transaction: the archive's COPY
# and the DELETE join it instead of each shipping 100,000 ids (dumping and loading them cost the
# prune ~40 % of its time).
PRUNE_BATCH = "dp_prune_batch"


def loaded_instance(model, db: str, values: dict):
    """What ``Model.from_db`` builds (fields left out load on access), without ``Model.__init__``:
    its pre_init/post_init signals and the relation descriptors' checks cost ~25 µs a row."""
    instance = model.__new__(model)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, db
    instance.__dict__.update(values)
    return instance


def uuid_array(ids) -> str:
    """Ids as one PostgreSQL array literal, for ``%s::uuid[]``: psycopg's array dumper, in Python,
    cost ~10 µs per 100 ids; a UUID's text needs no quoting. The cast refuses anything else."""
    return "{" + ",".join(map(str, ids)) + "}"


def lock_into_batch(candidates, *, table: str, order_by: str, id_type: str, limit: int) -> tuple[int, tuple | None]:
    """Lock up to ``limit`` of ``candidates`` in (``order_by``, id) order, skipping rows another
    transaction holds, into the temporary ``table`` (emptied at commit); how many, and the
    (``order_by``, id) of the last: where the prune's next batch starts."""
    locked = candidates.order_by(order_by, "id").select_for_update(skip_locked=True).values_list("id", order_by)[:limit]
    sql, params = locked.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table} "
                       f"(id {id_type} PRIMARY KEY, {order_by} timestamptz NOT NULL) ON COMMIT DELETE ROWS")
        cursor.execute(f"WITH locked AS ({sql}) INSERT INTO {table} (id, {order_by}) SELECT * FROM locked", params)
        count = cursor.rowcount
        cursor.execute(f"SELECT {order_by}, id FROM {table} ORDER BY {order_by} DESC, id DESC LIMIT 1")
        return count, cursor.fetchone()


def int_array(values) -> str:
    """Integers (None: NULL) as one PostgreSQL array literal, for ``%s::bigint[]``: as uuid_array,
    what psycopg's per-element array dumper cost in Python."""
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


# A UUID as str(uuid) writes it (the wire's ids): safe inside an array literal as it is, and the
# key the one-by-one path finds its row under. Other spellings uuid.UUID accepts (upper case,
# "{...}", no hyphens, "urn:uuid:") are left to that path, which decides them as it always has.
CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch


def execute_prepared(sql: str, params: list) -> list[tuple]:
    """Run ``sql`` as a server-side prepared statement of this connection and return its rows.
    Django's cursors bind parameters client-side (the text changes with every value) and Django
    turns psycopg's preparing off (prepare_threshold None, for connection poolers); this one
    statement is worth preparing: its text is constant, and parsing and planning a CTE of an
    UPDATE, a join and an upsert is a good part of its time. psycopg keeps the statement per
    connection (and forgets it after a ROLLBACK). Not prepared when the settings say how to
    prepare (OPTIONS prepare_threshold: psycopg follows it) or that a pooler runs in transaction
    mode (DISABLE_SERVER_SIDE_CURSORS). The query goes through Django's wrapper: errors become
    Django's, and the test client's query capture sees it."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.close_if_health_check_failed()  # as Django's own cursor() does
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = connection.connection
    db = connection.settings_dict
    prepare = "prepare_threshold" not in db.get("OPTIONS", {}) and not db.get("DISABLE_SERVER_SIDE_CURSORS")
    threshold = raw.prepare_threshold
    cursor = ServerBindingCursor(raw)
    wrapped = connection.make_debug_cursor(cursor) if connection.queries_logged else connection.make_cursor(cursor)
    try:
        if prepare:
            raw.prepare_threshold = 0  # prepared at its first run, then reused (this statement only)
        with wrapped:
            wrapped.execute(sql, params)
            rows = wrapped.fetchall()
        if connection.queries_logged and connection.queries_log and connection.queries_log[-1]["sql"] is None:
            connection.queries_log[-1]["sql"] = sql  # psycopg keeps no query text for a prepared run
        return rows
    finally:
        if prepare:
            raw.prepare_threshold = threshold
