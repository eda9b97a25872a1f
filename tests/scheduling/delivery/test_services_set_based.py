"""Record-only deliveries recorded set-based (one statement per batch: ScheduledMessageQuerySet.
deliver_in_flight with the per-minute figures' upsert in it), against the real database: the same
outcomes, rows, minute figures and metrics as the one-by-one path for every kind of copy, lateness
as lifecycle.lateness_ms computes it, the buckets as lateness_buckets.bucket_ms, one prepared
statement, and a row another transaction delivers meanwhile left to the one-by-one path."""

import threading
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Sum
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from scheduling.core import lifecycle
from scheduling.core.lateness_buckets import bucket_ms
from scheduling.delivery.minutes import delivery_minute_bucket_sql
from scheduling.delivery.services import Result, delivery_receive_many
from scheduling.models import DeliveryMinute, Endpoint, ScheduledMessage, Team
from scheduling.observability import metrics

pytestmark = pytest.mark.django_db
Status = ScheduledMessage.Status


def ms(n: float) -> timedelta:
    return timedelta(microseconds=round(n * 1000))


HOUR = timedelta(hours=1)
FIELDS = ("status", "delivery_count", "attempts", "delivered_at", "finished_at", "lateness_ms", "throttled_ms",
          "delivered_by", "last_error")
DELIVERY_METRICS = ("delay_deliveries", "delay_delivery_lateness_seconds", "delay_throttled",
                    "delay_throttle_wait_seconds", "delay_duplicates_suppressed", "delay_cancelled_arrivals",
                    "delay_superseded_copies", "delay_handler_failures", "delay_handler_retries")


@pytest.fixture
def frozen(monkeypatch):
    """The delivery service's clock stopped at now: two runs decide at the same instant."""
    now = timezone.now()
    monkeypatch.setattr("scheduling.delivery.services.timezone", SimpleNamespace(now=lambda: now))
    return now


def team(name=None) -> Team:
    return Team.objects.create(name=name or f"t-{uuid.uuid4().hex[:8]}")


def endpoint(owner: Team, versions, name="record", **fields) -> Endpoint:
    return Endpoint.objects.create(team=owner, name=name, queue=f"{owner.name}--{name}", topology=versions["v3"],
                                   **fields)


def message(target: Endpoint, now, *, due=-ms(40), created=-HOUR, **fields) -> ScheduledMessage:  # noqa: B008 (a timedelta)
    return ScheduledMessage.objects.create(endpoint=target, topology=target.topology, payload={}, requested_delay_ms=0,
                                           due_at=now + due, created_at=now + created,
                                           **{"status": Status.PUBLISHED, **fields})


def scenario(owner: Team, versions, now):
    """Every kind of copy, in one batch: (rows by name, the batch's items)."""
    record = endpoint(owner, versions)
    hook = endpoint(owner, versions, "hook", handler="webhook", handler_target="http://127.0.0.1:1/hook",
                    webhook_secret="s" * 32)
    task = endpoint(owner, versions, "task", handler="celery_task", handler_target="testapp.record_receipt")
    before = {"delivered_at": now - ms(880), "lateness_ms": 20, "delivery_count": 1}
    rows = {
        "due": message(record, now),
        "sub_ms": message(record, now, due=-ms(7.345)),  # floored to whole ms
        "pending": message(record, now, due=-ms(3), status=Status.PENDING),  # the relay's commit not seen yet
        "past": message(record, now, due=-timedelta(days=1), created=-ms(30.5)),  # late since accepted
        "ahead": message(record, now, due=-timedelta(seconds=1), created=ms(4.5)),  # accepted "after" now
        "late": message(record, now, due=-ms(70_123.4)),  # above 128 ms: a bucket 1/64 of a power of two wide
        "later": message(record, now, due=-ms(300.2)),
        "delivered": message(record, now, due=-ms(50), status=Status.DELIVERED, **before),
        "cancelled": message(record, now, due=-ms(50), status=Status.CANCELLED),
        "superseded": message(record, now, due=-ms(10)),
        "moved": message(record, now, due=-ms(12)),
        "early": message(record, now, due=HOUR),
        "retry": message(record, now, due=-ms(900), attempts=1, **before),  # its handler was changed to none
        "old_attempt": message(record, now, due=-ms(900), attempts=1, **before),
        "throttled": message(record, now, due=-ms(260)),
        "stamped": message(record, now, due=-ms(15)),
        "hook": message(hook, now, due=-ms(5)),
        "task": message(task, now, due=-ms(5)),
    }
    i = {name: str(row.id) for name, row in rows.items()}
    due_ms = {name: row.due_at_ms for name, row in rows.items()}
    items = [(i["due"], 0), (i["sub_ms"], 0, None, None), (i["pending"], 0), (i["past"], 0), (i["ahead"], 0),
             (i["late"], 0), (i["later"], 0), (i["due"], 0),  # the same copy twice in one batch
             (i["delivered"], 0), (i["cancelled"], 0), (i["superseded"], 0, due_ms["superseded"] - 1000),
             (i["moved"], 0, due_ms["moved"] + 7), (i["moved"], 0, due_ms["moved"]),  # its old copy, then the new
             (i["early"], 0), (i["retry"], 1), (i["old_attempt"], 0), (i["throttled"], 0, None, 250),
             (i["stamped"], 0, due_ms["stamped"], 0), ("00000000-0000-0000-0000-000000000000", 0), ("not-a-uuid", 0),
             (i["hook"], 0), (i["task"], 0), (i["due"], 0, due_ms["due"], 40)]
    return rows, items


def outcomes_of(outcomes, now):
    return [(o.result, o.attempt, o.retry_in, o.eta and o.eta - now) for o in outcomes]


def rows_of(rows):
    return {name: {f: getattr(ScheduledMessage.objects.get(id=row.id), f) for f in FIELDS} for name, row in rows.items()}


def minutes_of(owner: Team):
    """(minute, bucket) -> (deliveries, largest), over the shards."""
    return {(m, b): (n, largest) for m, b, n, largest in DeliveryMinute.objects.filter(team=owner)
            .values_list("minute", "bucket_ms").annotate(n=Sum("deliveries"), largest=Max("lateness_max_ms"))}


def metrics_of(owner: Team):
    """Every delivery sample of the team's labels (all new: the team is): name+labels -> value."""
    found = {}
    for family in REGISTRY.collect():
        if family.name not in DELIVERY_METRICS:
            continue
        for sample in family.samples:
            if sample.labels.get("team") == owner.name and not sample.name.endswith("_created"):
                found[(sample.name, tuple(sorted((k, v) for k, v in sample.labels.items() if k != "team")))] = sample.value
    return found


def test_every_kind_of_copy_comes_out_as_the_one_by_one_path_decides_it(versions, frozen, settings, monkeypatch,
                                                                       django_capture_on_commit_callbacks):
    settings.DELAY_CELERY_TASK_ALLOWLIST = []  # the task is refused in the worker: a failed attempt, no broker
    runs = {}
    for path in ("set-based", "one-by-one"):
        owner = team()
        rows, items = scenario(owner, versions, frozen)
        with monkeypatch.context() as patch:
            if path == "one-by-one":
                patch.setattr("scheduling.delivery.services._deliver_set_based", lambda items, outcomes, by: [])
            with django_capture_on_commit_callbacks(execute=True):
                outcomes = delivery_receive_many(items=items, by="w1@host")
        runs[path] = (outcomes_of(outcomes, frozen), rows_of(rows), minutes_of(owner), metrics_of(owner))

    (outcomes, rows, minutes, counted), (o2, r2, m2, c2) = runs["set-based"], runs["one-by-one"]
    assert outcomes == o2
    assert rows == r2
    assert minutes == m2 and sum(n for n, _ in minutes.values()) == 11  # the retry's too: its first hand-over's
    assert counted.keys() == c2.keys() and counted == pytest.approx(c2)
    # and what both decide, spelled out
    R = Result
    assert [o[0] for o in outcomes] == [
        R.DELIVERED, R.DELIVERED, R.DELIVERED, R.DELIVERED, R.DELIVERED, R.DELIVERED, R.DELIVERED, R.DUPLICATE,
        R.DUPLICATE, R.CANCELLED, R.SUPERSEDED, R.SUPERSEDED, R.DELIVERED, R.EARLY, R.DELIVERED, R.DUPLICATE,
        R.DELIVERED, R.DELIVERED, R.UNKNOWN, R.UNKNOWN, R.DEFERRED, R.RETRY, R.DUPLICATE]
    assert outcomes[13][3] == HOUR  # early: its eta, the due time
    assert {name: (row["lateness_ms"], row["delivery_count"]) for name, row in rows.items() if name in (
        "due", "sub_ms", "past", "ahead", "late", "retry", "superseded", "moved", "delivered", "cancelled")} == {
        "due": (40, 3), "sub_ms": (7, 1), "past": (30, 1), "ahead": (-5, 1), "late": (70_123, 1),
        "retry": (20, 1), "superseded": (None, 0), "moved": (12, 1), "delivered": (20, 2), "cancelled": (None, 1)}
    assert rows["throttled"]["throttled_ms"] == 250 and rows["due"]["throttled_ms"] is None
    assert rows["due"]["delivered_by"] == "w1@host" and rows["retry"]["delivered_by"] == ""
    assert rows["retry"]["delivered_at"] == frozen - ms(880) and rows["retry"]["finished_at"] == frozen
    assert rows["hook"]["status"] == Status.PUBLISHED and rows["hook"]["delivery_count"] == 0  # untouched
    labels = (("endpoint", "record"), ("version", "v3"))
    assert counted[("delay_deliveries_total", labels)] == 10  # first deliveries: not the retry's attempt
    assert counted[("delay_duplicates_suppressed_total", labels)] == 4
    assert counted[("delay_throttled_total", labels)] == 1


def test_a_batch_that_fails_after_the_statement_counts_nothing(versions, frozen, endpoint_name, monkeypatch,
                                                                django_capture_on_commit_callbacks):
    """One transaction: the statement's deliveries roll back with the one-by-one path's failure,
    so the loop's retry of the batch delivers them once (not as duplicates of themselves)."""
    owner = team()
    record = endpoint(owner, versions)
    rows = [message(record, frozen) for _ in range(3)]
    items = [(str(r.id), 0) for r in rows] + [(str(rows[0].id), 0)]  # a duplicate: the one-by-one path runs

    def fails(*args, **kwargs):
        raise DatabaseError("the database went away")

    with monkeypatch.context() as patch, django_capture_on_commit_callbacks(execute=True):
        patch.setattr("scheduling.delivery.services._receive_one_by_one", fails)
        with pytest.raises(DatabaseError):
            delivery_receive_many(items=items)
    assert {ScheduledMessage.objects.get(id=r.id).delivery_count for r in rows} == {0}
    assert minutes_of(owner) == {} and metrics_of(owner) == {}
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = delivery_receive_many(items=items)
    assert [o.result for o in outcomes] == [Result.DELIVERED] * 3 + [Result.DUPLICATE]
    assert [ScheduledMessage.objects.get(id=r.id).delivery_count for r in rows] == [2, 1, 1]
    assert metrics_of(owner)[("delay_deliveries_total", (("endpoint", "record"), ("version", "v3")))] == 3


def test_lateness_is_lifecycle_lateness_ms_to_the_microsecond(versions, frozen, endpoint_name):
    """Due and accepted at any microsecond, accepted before or after its due time (or, a clock
    ahead, after now): the statement's whole milliseconds are lifecycle.lateness_ms's, floored."""
    record = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    offsets = [(-ms(d / 7), ms(c / 3)) for d in range(0, 9000, 311) for c in (-3_600_000, -900, -1, 0, 1, 15)]
    rows = [message(record, frozen, due=due, created=created) for due, created in offsets]
    outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows])
    assert {o.result for o in outcomes} == {Result.DELIVERED}
    for row in rows:
        row.refresh_from_db()
        assert row.delivered_at == frozen
        assert row.lateness_ms == lifecycle.lateness_ms(row.due_at, frozen, accepted_at=row.created_at), row.id


def test_the_buckets_in_sql_are_bucket_ms():
    values = [*range(-300, 5000), *(2**k + d for k in range(7, 62) for d in (-1, 0, 1)), 2**63 - 1,
              *(int(1.37**k) for k in range(20, 137))]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT v, {delivery_minute_bucket_sql(value='v')} FROM unnest(%s::bigint[]) AS v", [values])
        found = dict(cursor.fetchall())
    assert found == {v: bucket_ms(v) for v in values}


def test_the_minute_figures_are_exact(versions, frozen, endpoint_name):
    """Lateness spread over exact and wide buckets, two teams, two batches adding to the same rows:
    the figures are the messages' own (count and largest per minute, team and bucket)."""
    owners = [team(), team()]
    targets = [endpoint(owner, versions) for owner in owners]
    lateness = [0, 1, 127, 128, 129, 130, 255, 256, 300, 301, 5000, 5040, 70_000, 3_600_000]
    rows = [message(targets[n % 2], frozen, due=-ms(late)) for n, late in enumerate(lateness * 2)]
    for batch in (rows[::2], rows[1::2]):
        delivery_receive_many(items=[(str(r.id), 0) for r in batch])
    minute = frozen.replace(second=0, microsecond=0)
    for n, owner in enumerate(owners):
        expected = {}
        for late in ScheduledMessage.objects.filter(id__in=[r.id for r in rows[n::2]]).values_list("lateness_ms",
                                                                                                   flat=True):
            count, largest = expected.get((minute, bucket_ms(late)), (0, late))
            expected[(minute, bucket_ms(late))] = (count + 1, max(late, largest))
        assert minutes_of(owner) == expected and sum(n for n, _ in expected.values()) == len(lateness)


def test_one_prepared_statement_whatever_the_batch_size(versions, frozen, endpoint_name):
    record = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    for size in (1, 3, 2):
        batch = [message(record, frozen) for _ in range(size)]
        assert {o.result for o in delivery_receive_many(items=[(str(r.id), 0) for r in batch])} == {Result.DELIVERED}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(DISTINCT statement), sum(generic_plans + custom_plans), bool_or(from_sql) "
                       "FROM pg_prepared_statements WHERE statement LIKE 'WITH v AS (SELECT * FROM unnest%%'")
        statements, plans, from_sql = cursor.fetchone()
    assert statements == 1 and plans >= 3 and from_sql is False


def test_not_prepared_when_the_settings_say_how_to_prepare(versions, frozen, endpoint_name, monkeypatch):
    """OPTIONS prepare_threshold (None: a pooler in transaction mode): psycopg follows it."""
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {**connection.settings_dict["OPTIONS"],
                                                             "prepare_threshold": None})
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    connection.connection._prepared.clear()  # psycopg's own list, to match
    record = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    row = message(record, frozen)
    assert delivery_receive_many(items=[(str(row.id), 0)])[0].result is Result.DELIVERED
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone()[0] == 0


def test_many_observations_export_what_one_by_one_would():
    registry = CollectorRegistry()
    histogram = Histogram("h", "", ["way"], buckets=metrics.LATENESS_BUCKETS, registry=registry)
    values = [0, 0.001, 0.0011, 0.0025, 0.003, 0.1, 0.25, 0.2500001, 59.9, 60, 3600, 3600.5, 1e6] * 3
    for value in values:
        histogram.labels("one").observe(value)
    metrics.observe_many(histogram.labels("many"), values)
    (family,) = registry.collect()
    samples = defaultdict(dict)
    for s in family.samples:
        if not s.name.endswith("_created"):
            samples[s.labels["way"]][(s.name, s.labels.get("le"))] = s.value
    assert samples["many"] == pytest.approx(samples["one"]) and samples["many"][("h_count", None)] == len(values)


@pytest.mark.django_db(transaction=True)
def test_a_row_delivered_meanwhile_by_another_transaction_is_a_duplicate(versions, endpoint_name):
    """Compare-and-set without a lock query: the statement waits for the other transaction's row
    lock, sees its delivery once it commits and does not take the row; the one-by-one path then
    finds it delivered: a duplicate, counted. The handler (here: none) ran once."""
    record = Endpoint.objects.create(name=endpoint_name, queue=endpoint_name, topology=versions["v3"])
    row = message(record, timezone.now())
    holding, results = threading.Event(), {}

    def other_worker():
        try:
            with transaction.atomic():
                results["other"] = delivery_receive_many(items=[(str(row.id), 0)], by="w2@host")[0].result
                holding.set()
                time.sleep(0.5)  # holds the row until it commits
        finally:
            holding.set()
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    assert holding.wait(30)
    started = time.monotonic()
    (outcome,) = delivery_receive_many(items=[(str(row.id), 0)], by="w1@host")
    waited = time.monotonic() - started
    thread.join(30)
    assert (results["other"], outcome.result) == (Result.DELIVERED, Result.DUPLICATE)
    assert waited >= 0.3  # it waited for the other transaction's commit
    row.refresh_from_db()
    assert (row.status, row.delivery_count, row.delivered_by) == (Status.DELIVERED, 2, "w2@host")
    assert DeliveryMinute.objects.aggregate(n=Sum("deliveries"))["n"] == 1
