"""The messages' bulk statements, one PostgreSQL statement each, in raw SQL where the ORM's own
cost a bulk request most of its time (COPY, UPDATE ... FROM a JSON batch or unnest(arrays), FOR
UPDATE over an array of ids). ScheduledMessage's manager is built from this QuerySet (models/messages.py)."""
from __future__ import annotations

from datetime import datetime

import orjson
from django.db import connection, models

from scheduling.core.lifecycle import IN_FLIGHT, Status, sql_list
from scheduling.db.sql import (
    PRUNE_BATCH,
    execute_prepared,
    int_array,
    loaded_instance,
    lock_into_batch,
    uuid_array,
)


class ScheduledMessageQuerySet(models.QuerySet):
    """Bulk writes in one PostgreSQL statement each. They write what they are given: which
    statuses and fields a change means is the lifecycle's (scheduling/core/lifecycle.py) and the
    services' business."""

    def insert_many(self, rows: list[models.Model]) -> None:
        """Insert new, fully built rows (every value set, as the scheduling service does) through
        COPY: bulk_create adapts ~19 parameters per row in Python and cost ~0.17 ms a row, most of
        a bulk API call. Errors become Django's (IntegrityError)."""
        if not rows:
            return
        fields = self.model._meta.concrete_fields
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        # psycopg adapts UUIDs, ints, strings and aware datetimes itself; only JSON needs Django's
        # preparation (Django's datetime path alone cost ~0.1 ms a row in timezone checks).
        # A JSON field's text when the scheduling service encoded it already (``payload_json``).
        prepare = [
            (f.attname, (lambda row, f=f: getattr(row, f"{f.attname}_json", None)
                         or f.get_db_prep_save(getattr(row, f.attname), connection))
             if isinstance(f, models.JSONField) else None)
            for f in fields
        ]
        with connection.cursor() as cursor, connection.wrap_database_errors:
            with cursor.cursor.copy(f"COPY {self.model._meta.db_table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row([prep(row) if prep else getattr(row, name) for name, prep in prepare])

    DELIVERY_FIELDS = ("status", "delivered_at", "lateness_ms", "delivery_count", "attempts", "last_error",
                       "delivered_by", "finished_at", "throttled_ms", "waiting_since")

    DELIVERY_TYPES = ("text", "timestamptz", "bigint", "integer", "integer", "text", "text", "timestamptz", "bigint",
                      "timestamptz")

    def save_delivery_state(self, rows: list[models.Model]) -> None:
        """Write what the delivery path changed on a batch of locked rows, in one statement: the
        batch goes as one JSON document (orjson) read by jsonb_array_elements. An array parameter
        per field cost psycopg's Python array dumper ~25 % of the delivery loop in a burst."""
        if not rows:
            return
        table, fields = self.model._meta.db_table, self.DELIVERY_FIELDS
        batch = orjson.dumps([[str(r.id), *(getattr(r, f) for f in fields)] for r in rows])
        record = ", ".join(f"(v->>{i + 1})" + ("" if kind == "text" else f"::{kind}")
                           for i, kind in enumerate(self.DELIVERY_TYPES))
        sets = ", ".join(f"{f} = v.{f}" for f in fields)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS m SET {sets} FROM (SELECT (v->>0)::uuid AS id, {record} "
                f"FROM jsonb_array_elements(%s::jsonb) AS v) AS v(id, {', '.join(fields)}) WHERE m.id = v.id",
                [batch.decode()],
            )

    # created_at: lateness counts from the later of due_at and it (lifecycle.lateness_ms)
    # topology_id: the version a delivery is counted under (scheduling/observability/metrics.py)
    # on_delivered_id, on_failed_id, notification: whether its outcome is told (notifications/services.py)
    # expires_at: past it, an arrival expires the row instead (lifecycle.arrive)
    # ordering_key: a keyed row is handed over only in its turn (messages/ordering.py); overlap, schedule:
    # a schedule's run its overlap policy skips, counted on its schedule (delivery/overlap.py)
    LOCKED_FOR_DELIVERY = ("id", "endpoint_id", "topology_id", "due_at", "created_at", *DELIVERY_FIELDS,
                           "on_delivered_id", "on_failed_id", "notification", "expires_at", "ordering_key",
                           "overlap", "schedule")

    def locked_for_delivery(self, ids) -> list[models.Model]:
        """Lock a batch of rows (FOR UPDATE, one array parameter) and load only what delivering
        them reads and writes, with their endpoint's team, handler, max_concurrent, max_concurrent_per_key
        and queue as ``endpoint_team_id``, ``endpoint_handler``, ``endpoint_max_concurrent``,
        ``endpoint_max_concurrent_per_key`` and ``endpoint_queue``; other fields load on access. The ORM's IN list of 500 ids and its full rows cost the delivery
        loop ~40 % of its time in a burst, and a second query for the endpoints a round trip of
        every delivery's lateness (docs/operations/performance.md)."""
        if not ids:
            return []
        # from_db wants the values in the model's field order
        fields = [f.attname for f in self.model._meta.concrete_fields if f.attname in self.LOCKED_FOR_DELIVERY]
        columns = ", ".join(f"m.{f}" for f in fields)
        endpoints = self.model._meta.get_field("endpoint").related_model._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {columns}, e.team_id, e.handler, e.max_concurrent, e.max_concurrent_per_key, e.queue "
                f"FROM {self.model._meta.db_table} m "
                f"JOIN {endpoints} e ON e.id = m.endpoint_id "
                f"WHERE m.id = ANY(%s::uuid[]) FOR UPDATE OF m",
                [uuid_array(ids)],
            )
            rows = cursor.fetchall()
        messages = []
        for row in rows:
            values = {**dict(zip(fields, row)), "endpoint_team_id": row[-5], "endpoint_handler": row[-4],
                      "endpoint_max_concurrent": row[-3], "endpoint_max_concurrent_per_key": row[-2],
                      "endpoint_queue": row[-1]}
            messages.append(loaded_instance(self.model, self.db, values))
        return messages

    def deliver_in_flight(self, items: list[tuple[str, int, int | None, int | None, str | None]], *, now: datetime,
                          by: str,
                          handlers: tuple[str, ...], counted_by: str = "") -> list[tuple]:
        """Record as delivered, in one statement and without a lock query first, every copy of
        ``items`` (message id, attempt, the due time in ms the copy carries or None, throttled
        ms or None, the queue the copy came from or None; ids canonical UUIDs, each once) whose
        row is still in flight (pending or published) for that attempt and that due time, due by
        ``now`` and not past its ``expires_at`` (those are the one-by-one path's: it expires them),
        of an endpoint whose handler is one of ``handlers`` and whose queue is the one
        the copy came from (a copy in another endpoint's queue takes nothing): a compare-and-set UPDATE ... FROM unnest(arrays) whose
        WHERE is what lifecycle.superseded and lifecycle.arrive decide for a delivery. A row
        another transaction holds is waited for, then its new version checked again (READ
        COMMITTED): a copy delivered there meanwhile is not taken here. Rows are taken in id
        order (the arrays are sorted), as the lock query of the one-by-one path takes them.

        The fields are arrive's for a DELIVER (attempt 0: delivered_at, lateness_ms as
        lifecycle.lateness_ms computes it, throttled_ms when not 0, delivered_by, delivery_count
        + 1; a later attempt: status and finished_at only). ``counted_by``: a data-modifying
        statement over ``taken`` (delivered_at, lateness_ms and team_id of each row taken) run
        as part of the same statement, e.g. the per-minute figures' upsert. Returns (index in
        ``items``, endpoint_id, topology_id, lateness_ms, attempt, throttled_ms) per copy taken,
        in no particular order; the other rows are untouched."""
        if not items:
            return []
        order = sorted(range(len(items)), key=lambda i: items[i][0])
        table = self.model._meta.db_table
        endpoints = self.model._meta.get_field("endpoint").related_model._meta.db_table
        statuses = sql_list(IN_FLIGHT)
        handler_list = ", ".join(f"'{h}'" for h in handlers)  # the model's choices, never a caller's text
        counted = f", counted AS ({counted_by})" if counted_by else ""
        # Times in whole milliseconds, floored: clock.to_epoch_ms and lifecycle.lateness_ms. The
        # status and due time are tested "IS TRUE" (not NULL: the same rows) to keep them out of the
        # index conditions: the rows are found by id, whatever the statistics say (a plan that
        # scanned every due or in-flight row would cost a batch as much as the backlog).
        rows = execute_prepared(
            f"WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::integer[], %s::bigint[], %s::bigint[], %s::text[]) "
            f"WITH ORDINALITY AS v(id, attempt, due_ms, throttled_ms, queue, n)), "
            f"c AS (SELECT %s::timestamptz AS now, %s::text AS by), "
            f"taken AS (UPDATE {table} AS m SET status = '{Status.DELIVERED.value}', finished_at = c.now, "
            f"delivered_at = CASE WHEN v.attempt = 0 THEN c.now ELSE m.delivered_at END, "
            f"lateness_ms = CASE WHEN v.attempt = 0 THEN floor((extract(epoch FROM c.now) "
            f"- extract(epoch FROM greatest(m.due_at, m.created_at))) * 1000)::bigint ELSE m.lateness_ms END, "
            f"throttled_ms = CASE WHEN v.attempt = 0 AND v.throttled_ms <> 0 THEN v.throttled_ms "
            f"ELSE m.throttled_ms END, "
            f"delivered_by = CASE WHEN v.attempt = 0 THEN c.by ELSE m.delivered_by END, "
            f"delivery_count = m.delivery_count + CASE WHEN v.attempt = 0 THEN 1 ELSE 0 END "
            f"FROM v, c, {endpoints} AS e "
            f"WHERE m.id = v.id AND e.id = m.endpoint_id AND e.handler IN ({handler_list}) "
            f"AND (v.queue IS NULL OR e.queue = v.queue) "
            f"AND (m.status IN ({statuses}) AND m.due_at <= c.now) IS TRUE AND m.attempts = v.attempt "
            f"AND (m.expires_at IS NULL OR m.expires_at > c.now) AND m.ordering_key IS NULL "
            f"AND (v.due_ms IS NULL OR v.attempt <> 0 OR v.due_ms = floor(extract(epoch FROM m.due_at) * 1000)) "
            f"RETURNING v.n, m.endpoint_id, m.topology_id, m.lateness_ms, v.attempt, "
            f"CASE WHEN v.attempt = 0 AND v.throttled_ms <> 0 THEN v.throttled_ms END AS throttled_ms, "
            f"m.delivered_at, e.team_id, (m.on_delivered_id IS NOT NULL AND m.notification IS NULL) AS callback)"
            f"{counted} "
            f"SELECT n, endpoint_id, topology_id, lateness_ms, attempt, throttled_ms, callback FROM taken",
            [uuid_array(items[i][0] for i in order), int_array(items[i][1] for i in order),
             int_array(items[i][2] for i in order), int_array(items[i][3] for i in order),
             [(items[i][4] if len(items[i]) > 4 else None) for i in order], now, by])
        return [(order[n - 1], *rest) for n, *rest in rows]

    def handler_data(self, ids) -> dict:
        """Id -> (payload, its endpoint) for messages whose handler runs now, in one query: the
        ORM's two (the payloads, then the endpoints) would be two round trips and ~0.5 ms of query
        building per webhook call, whose transaction makes one call each."""
        if not ids:
            return {}
        endpoint_model = self.model._meta.get_field("endpoint").related_model
        endpoint_fields = [f.attname for f in endpoint_model._meta.concrete_fields]
        payload = self.model._meta.get_field("payload")
        columns = ", ".join(f"e.{f}" for f in endpoint_fields)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT m.id, m.payload::text, {columns} FROM {self.model._meta.db_table} m "
                f"JOIN {endpoint_model._meta.db_table} e ON e.id = m.endpoint_id WHERE m.id = ANY(%s::uuid[])",
                [uuid_array(ids)],
            )
            rows = cursor.fetchall()
        endpoints = {}
        data = {}
        for message_id, payload_text, *values in rows:
            endpoint = endpoints.get(values[0])
            if endpoint is None:
                endpoint = endpoints[values[0]] = endpoint_model.from_db(self.db, endpoint_fields, values)
            data[message_id] = (payload.from_db_value(payload_text, None, connection), endpoint)
        return data

    def lock_ids(self, ids: list, *, status: str) -> set:
        """Lock the rows of these ids that are in ``status`` (FOR UPDATE SKIP LOCKED, one array
        parameter); returns the ids locked. Rows another transaction holds are skipped."""
        if not ids:
            return set()
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {self.model._meta.db_table} WHERE id = ANY(%s::uuid[]) AND status = %s "
                "FOR UPDATE SKIP LOCKED", [uuid_array(ids), status],
            )
            return {row[0] for row in cursor.fetchall()}

    def lock_prune_batch(self, candidates, *, limit: int) -> tuple[int, tuple | None]:
        """Lock up to ``limit`` rows of ``candidates`` in (created_at, id) order, skipping rows
        another transaction holds, into this transaction's batch table; returns how many and the
        (created_at, id) of the last. Inside a transaction only."""
        return lock_into_batch(candidates, table=PRUNE_BATCH, order_by="created_at", id_type="uuid", limit=limit)

    def delete_prune_batch(self) -> int:
        """Delete the rows of this transaction's batch table; returns how many went."""
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.model._meta.db_table} m USING {PRUNE_BATCH} b WHERE m.id = b.id")
            return cursor.rowcount

    def set_published(self, rows: list[models.Model], *, status: str, published_at, from_statuses,
                      topology=None) -> int:
        """Record a confirmed batch (routing key and first exchange per row) as ``status``, on
        the rows still in one of ``from_statuses`` (compare-and-set: a row delivered meanwhile is
        left alone). Django's bulk_update builds a CASE per row and field and cost ~1.7 ms per
        row here; one UPDATE ... FROM unnest(arrays) does the batch with three parameters (a
        VALUES list had three per row, each bound in Python)."""
        if not rows:
            return 0
        table = self.model._meta.db_table
        set_topology = ", topology_id = %s" if topology is not None else ""
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS m SET status = %s, published_at = %s, last_error = ''{set_topology}, "
                f"routing_key = v.routing_key, first_exchange = v.first_exchange "
                f"FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS v(id, routing_key, first_exchange) "
                f"WHERE m.id = v.id AND m.status = ANY(%s)",
                [status, published_at, *([topology.pk] if topology is not None else []), [row.id for row in rows],
                 [row.routing_key for row in rows], [row.first_exchange for row in rows], sorted(from_statuses)],
            )
            return cursor.rowcount
