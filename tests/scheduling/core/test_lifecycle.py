"""The message lifecycle, pinned as tables: every (status, event) pair, every kind of arrival,
handler failures, cancel, republish and resend. Pure: no database."""

import ast
import re
from datetime import datetime, timedelta, timezone

import pytest

from harness.paths import ROOT
from scheduling.core import lifecycle
from scheduling.core.lifecycle import Arrival, Event, State, Status

P, U, D, C, F = Status.PENDING, Status.PUBLISHED, Status.DELIVERED, Status.CANCELLED, Status.FAILED
X, S, W, K = Status.EXPIRED, Status.SUPERSEDED, Status.WAITING, Status.SKIPPED
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)
DUE = NOW - timedelta(milliseconds=40)

# (from, event) -> to; every pair not listed is illegal
ALLOWED = {
    (None, Event.SCHEDULE): P,
    (P, Event.PUBLISH): U, (U, Event.PUBLISH): U,
    (P, Event.DELIVER): D, (U, Event.DELIVER): D,
    (P, Event.DUPLICATE): P, (U, Event.DUPLICATE): U, (D, Event.DUPLICATE): D, (C, Event.DUPLICATE): C,
    (F, Event.DUPLICATE): F, (X, Event.DUPLICATE): X, (S, Event.DUPLICATE): S,
    (D, Event.RETRY): U,
    (D, Event.GIVE_UP): F,
    (P, Event.UNROUTABLE): F, (U, Event.UNROUTABLE): F,
    (P, Event.UNBUILDABLE): F, (U, Event.UNBUILDABLE): F,
    (P, Event.CANCEL): C, (U, Event.CANCEL): C, (C, Event.CANCEL): C,
    (F, Event.REPUBLISH): P,
    (P, Event.RESCHEDULE): P, (U, Event.RESCHEDULE): P,
    (D, Event.RESEND): P, (F, Event.RESEND): P,
    (P, Event.EXPIRE): X, (U, Event.EXPIRE): X, (D, Event.EXPIRE): X,
    (P, Event.SUPERSEDE): S, (U, Event.SUPERSEDE): S,  # debounce: a newer message replaced it
    # ordering keys: waiting for the key's turn, woken once the message before it ended
    (P, Event.WAIT): W, (U, Event.WAIT): W, (W, Event.WAKE): P, (W, Event.DELIVER): D, (W, Event.DUPLICATE): W,
    (W, Event.CANCEL): C, (W, Event.RESCHEDULE): P, (W, Event.EXPIRE): X,
    # a schedule's overlap: a run not sent because the previous run had not ended
    (P, Event.SKIP): K, (U, Event.SKIP): K, (W, Event.SKIP): K, (K, Event.DUPLICATE): K,
}


@pytest.mark.parametrize("status", [None, *Status])
@pytest.mark.parametrize("event", list(Event))
def test_every_transition_is_allowed_or_refused_as_the_table_says(status, event):
    if (status, event) in ALLOWED:
        assert lifecycle.transition(status, event) == ALLOWED[(status, event)]
    else:
        with pytest.raises(lifecycle.IllegalTransition):
            lifecycle.transition(status, event)


def test_statuses_are_strings_the_database_stores():
    assert [s.value for s in Status] == ["pending", "published", "delivered", "cancelled", "failed", "expired",
                                        "superseded", "waiting", "skipped"]
    assert lifecycle.transition("published", Event.DELIVER) == "delivered"


def test_in_flight_is_what_may_still_be_delivered():
    assert lifecycle.IN_FLIGHT == {P, U} == lifecycle.sources(Event.DELIVER) - {W}  # waiting: in its key's turn
    assert lifecycle.sources(Event.PUBLISH) == {P, U}
    assert lifecycle.sources(Event.UNROUTABLE) == {P, U}  # a delivered message is never marked unroutable


@pytest.mark.parametrize(("due_at", "at", "ms"), [
    (DUE, DUE, 0), (DUE, DUE + timedelta(milliseconds=7), 7), (DUE, DUE - timedelta(milliseconds=3), -3),
    (DUE, DUE + timedelta(microseconds=999), 0),  # whole milliseconds, rounded down
    (DUE, DUE - timedelta(microseconds=1), -1),
])
def test_lateness_is_whole_milliseconds_late(due_at, at, ms):
    assert lifecycle.lateness_ms(due_at, at) == ms


DAY = timedelta(days=1)


@pytest.mark.parametrize(("due_at", "accepted_at", "ms"), [
    (DUE - DAY, DUE, 40),  # asked for a day ago: late only since it was accepted
    (DUE, DUE, 40),  # a delay of 0
    (DUE, DUE - DAY, 40),  # a delay of a day: from the due time, as before
    (DUE, None, 40),  # no acceptance time known: from the due time
])
def test_lateness_counts_from_the_later_of_due_and_accepted(due_at, accepted_at, ms):
    assert lifecycle.lateness_ms(due_at, NOW, accepted_at=accepted_at) == ms


@pytest.mark.parametrize(("due_at", "accepted_at", "in_past"), [
    (DUE - DAY, DUE, True),
    (DUE - timedelta(milliseconds=1), DUE, True),  # strictly earlier: no tolerance
    (DUE, DUE, False),  # a delay of 0: due when accepted
    (DUE + timedelta(milliseconds=1), DUE, False),
])
def test_scheduled_in_past_is_due_strictly_before_accepted(due_at, accepted_at, in_past):
    assert lifecycle.scheduled_in_past(due_at, accepted_at) is in_past


def test_a_backdated_arrival_records_the_requested_time_untouched_and_a_small_lateness():
    state = State(status=U, due_at=DUE - DAY, created_at=NOW - timedelta(milliseconds=3))
    arrival, change = lifecycle.arrive(state, attempt=0, now=NOW)
    assert arrival is Arrival.DELIVER and change["lateness_ms"] == 3 and "due_at" not in change


# (status, attempts, delivery_count, arriving attempt, redelivered, rerun_redelivered) -> (arrival, change)
ARRIVALS = [
    # the copy that came through the cascade
    ((U, 0, 0, 0, False, False),
     (Arrival.DELIVER, {"delivery_count": 1, "status": D, "delivered_at": NOW, "lateness_ms": 40,
                        "finished_at": NOW})),
    ((P, 0, 0, 0, False, False),  # the broker was faster than the relay's commit
     (Arrival.DELIVER, {"delivery_count": 1, "status": D, "delivered_at": NOW, "lateness_ms": 40,
                        "finished_at": NOW})),
    # another copy of it: counted, dropped
    ((D, 0, 1, 0, False, False), (Arrival.DUPLICATE, {"delivery_count": 2})),
    ((F, 6, 1, 0, False, False), (Arrival.DUPLICATE, {"delivery_count": 2})),
    ((C, 0, 0, 0, False, False), (Arrival.CANCELLED, {"delivery_count": 1})),
    # handler retries: attempt n is delivered only while it is the current one; not counted again
    ((U, 1, 1, 1, False, False), (Arrival.DELIVER, {"status": D, "finished_at": NOW})),
    ((U, 2, 1, 1, False, False), (Arrival.DUPLICATE, {})),  # a stale retry
    ((U, 1, 1, 0, False, False), (Arrival.DUPLICATE, {"delivery_count": 2})),  # attempt 0 again, mid-retry
    ((C, 1, 1, 1, False, False), (Arrival.CANCELLED, {})),
    # Celery tasks with acks_late: a copy redelivered after a worker died mid-run runs again
    ((D, 0, 1, 0, True, True), (Arrival.DELIVER, {"delivery_count": 2})),
    ((D, 0, 1, 0, False, True), (Arrival.DUPLICATE, {"delivery_count": 2})),
    ((D, 0, 1, 0, True, False), (Arrival.DUPLICATE, {"delivery_count": 2})),  # not for the delivery loop
    ((C, 0, 0, 0, True, True), (Arrival.CANCELLED, {"delivery_count": 1})),
]


@pytest.mark.parametrize(("given", "expected"), ARRIVALS)
def test_arrivals(given, expected):
    status, attempts, count, attempt, redelivered, rerun = given
    state = State(status=status, due_at=DUE, attempts=attempts, delivery_count=count)
    assert lifecycle.arrive(state, attempt=attempt, now=NOW, redelivered=redelivered,
                            rerun_redelivered=rerun) == expected


@pytest.mark.parametrize(("count", "runs"), [(1, True), (3, True), (4, False), (9, False)])
def test_reruns_are_bounded_by_every_hand_over_so_far(count, runs):
    state = State(status=D, due_at=DUE, delivery_count=count)
    arrival, change = lifecycle.arrive(state, attempt=0, now=NOW, redelivered=True, rerun_redelivered=True,
                                       max_reruns=3)
    assert (arrival is Arrival.DELIVER) is runs
    assert change["delivery_count"] == count + 1
    if not runs:
        assert change["status"] == F and change["finished_at"] == NOW and "3 rerun" in change["last_error"]


def test_two_copies_in_one_batch_deliver_once():
    """The second copy sees what the first one recorded: the handler runs once."""
    row = State(status=U, due_at=DUE)
    first, change = lifecycle.arrive(row, attempt=0, now=NOW)
    row = State(status=change["status"], due_at=DUE, delivery_count=change["delivery_count"])
    second, change = lifecycle.arrive(row, attempt=0, now=NOW)
    assert (first, second) == (Arrival.DELIVER, Arrival.DUPLICATE) and change == {"delivery_count": 2}


@pytest.mark.parametrize(("attempts", "max_retries", "event", "status", "finished_at"), [
    (0, 5, Event.RETRY, U, None), (4, 5, Event.RETRY, U, None),  # in flight again
    (5, 5, Event.GIVE_UP, F, NOW), (0, 0, Event.GIVE_UP, F, NOW),  # finished: its retention starts
])
def test_a_failing_handler_retries_then_gives_up(attempts, max_retries, event, status, finished_at):
    state = State(status=D, due_at=DUE, attempts=attempts)
    assert lifecycle.handler_failed(state, error="RuntimeError: 500", max_retries=max_retries, now=NOW) == (
        event, {"status": status, "attempts": attempts + 1,
                "last_error": f"handler attempt {attempts + 1}: RuntimeError: 500", "finished_at": finished_at})


@pytest.mark.parametrize(("status", "attempts", "attempt", "change"), [
    (U, 1, 1, {"attempts": 0}), (U, 3, 3, {"attempts": 2}),
    (D, 1, 1, {}),  # the retry arrived and was delivered meanwhile
    (U, 2, 1, {}),  # a later attempt is under way
    (C, 1, 1, {}), (F, 6, 6, {}), (U, 0, 0, {}),
])
def test_a_retry_the_broker_never_took_is_forgotten(status, attempts, attempt, change):
    assert lifecycle.retry_unsent(State(status=status, due_at=DUE, attempts=attempts), attempt=attempt) == change


def test_after_an_unsent_retry_the_copy_handed_back_delivers_again():
    row = State(status=D, due_at=DUE, delivery_count=1)
    _, failed = lifecycle.handler_failed(row, error="OperationalError: broker down", max_retries=5, now=NOW)
    row = State(status=failed["status"], due_at=DUE, attempts=failed["attempts"], delivery_count=1)
    assert lifecycle.arrive(row, attempt=0, now=NOW)[0] is Arrival.DUPLICATE  # what lost messages before
    row = State(status=row.status, due_at=DUE, attempts=lifecycle.retry_unsent(row, attempt=1)["attempts"],
                delivery_count=1)
    assert lifecycle.arrive(row, attempt=0, now=NOW)[0] is Arrival.DELIVER


def test_handler_errors_are_cut_to_2000_characters():
    _, change = lifecycle.handler_failed(State(status=D, due_at=DUE), error="x" * 5000, max_retries=1, now=NOW)
    assert len(change["last_error"]) == 2000


@pytest.mark.parametrize(("status", "change"), [
    (P, {"status": C, "cancelled_at": NOW, "finished_at": NOW}),
    (U, {"status": C, "cancelled_at": NOW, "finished_at": NOW}),
    (C, {}),
])
def test_cancel(status, change):
    assert lifecycle.cancel(State(status=status, due_at=DUE), now=NOW) == change


@pytest.mark.parametrize("status", [D, F])
def test_what_happened_cannot_be_cancelled(status):
    with pytest.raises(lifecycle.IllegalTransition, match=f"a {status} message cannot take 'cancel'"):
        lifecycle.cancel(State(status=status, due_at=DUE), now=NOW)


def test_republish_starts_a_failed_message_over():
    assert lifecycle.republish(State(status=F, due_at=DUE, attempts=6, delivery_count=2)) == {
        "status": P, "attempts": 0, "delivered_at": None, "lateness_ms": None, "finished_at": None}
    for status in (P, U, D, C):
        with pytest.raises(lifecycle.IllegalTransition):
            lifecycle.republish(State(status=status, due_at=DUE))


@pytest.mark.parametrize("status", [D, F])
def test_resend_starts_a_delivered_or_failed_message_over(status):
    assert lifecycle.resend(State(status=status, due_at=DUE, attempts=2, delivery_count=1)) == {
        "status": P, "attempts": 0, "delivered_at": None, "lateness_ms": None, "finished_at": None}


@pytest.mark.parametrize("status", [P, U, C])
def test_only_what_was_delivered_or_failed_can_be_resent(status):
    with pytest.raises(lifecycle.IllegalTransition, match=f"a {status} message cannot take 'resend'"):
        lifecycle.resend(State(status=status, due_at=DUE))


def test_a_resent_message_is_delivered_once_more_then_its_copies_are_duplicates():
    delivered = State(status=D, due_at=DUE, attempts=1, delivery_count=1)
    change = lifecycle.resend(delivered)
    resent = State(status=change["status"], due_at=DUE, attempts=change["attempts"], delivery_count=1)
    arrival, change = lifecycle.arrive(resent, attempt=0, now=NOW)
    assert arrival is Arrival.DELIVER and change["status"] == D and change["delivery_count"] == 2
    again = State(status=change["status"], due_at=DUE, attempts=0, delivery_count=2)
    assert lifecycle.arrive(again, attempt=0, now=NOW)[0] is Arrival.DUPLICATE


def test_unroutable_fails_a_message_and_finishes_it():
    assert lifecycle.unroutable(reason="no queue", now=NOW) == {"status": F, "last_error": "no queue",
                                                               "finished_at": NOW}


def test_every_status_is_in_flight_or_finished():
    """In flight (or waiting for its ordering key's turn): never pruned. Finished: pruned once its
    retention has passed since finished_at."""
    assert lifecycle.FINISHED | lifecycle.ORDER_OPEN == set(Status) and not lifecycle.FINISHED & lifecycle.ORDER_OPEN


def test_apply_sets_fields_and_names_them():
    class Row:
        status, attempts = U, 0

    row = Row()
    assert lifecycle.apply(row, {"status": D, "attempts": 1}) == ["status", "attempts"]
    assert (row.status, row.attempts) == (D, 1)


def test_reschedule_makes_a_message_pending_at_its_new_time_and_keeps_the_old_one():
    later = DUE + timedelta(hours=1)
    for status in (P, U):
        assert lifecycle.reschedule(State(status=status, due_at=DUE), due_at=later, now=NOW, history=None) == {
            "status": P, "due_at": later, "published_at": None,
            "due_history": [{"due_at": DUE.isoformat().replace("+00:00", "Z"),
                             "moved_at": NOW.isoformat().replace("+00:00", "Z")}]}
    twice = lifecycle.reschedule(State(status=P, due_at=later), due_at=DUE, now=NOW, history=[{"due_at": "first"}])
    assert [h["due_at"] for h in twice["due_history"]] == ["first", later.isoformat().replace("+00:00", "Z")]
    for status in (D, C, F):
        with pytest.raises(lifecycle.IllegalTransition, match="cannot take 'reschedule'"):
            lifecycle.reschedule(State(status=status, due_at=DUE), due_at=later, now=NOW, history=None)


DUE_MS = (DUE - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


@pytest.mark.parametrize(("status", "attempt", "due_ms", "dropped"), [
    (U, 0, DUE_MS - 3_600_000, True),  # the copy for the time before a reschedule
    (P, 0, DUE_MS + 1, True),  # rescheduled again and not yet published anew
    (U, 0, DUE_MS, False),  # the copy for its time
    (U, 0, None, False),  # a copy that does not say its time (another producer)
    (U, 2, DUE_MS - 3_600_000, False),  # a retry carries its backoff's time
    (D, 0, DUE_MS + 3_600_000, True),  # moved earlier and delivered: the old copy is no duplicate
    (C, 0, DUE_MS - 3_600_000, True),
    (D, 0, DUE_MS, False),  # a second copy for its time: a duplicate, counted as such
])
def test_a_copy_for_a_due_time_the_message_no_longer_has_is_superseded(status, attempt, due_ms, dropped):
    state = State(status=status, due_at=DUE, attempts=attempt)
    assert lifecycle.superseded(state, attempt=attempt, due_ms=due_ms) is dropped


def test_a_superseded_message_is_finished_and_its_copy_dropped_uncounted_on_arrival():
    change = lifecycle.supersede(State(status=U, due_at=DUE), now=NOW)
    assert change == {"status": S, "finished_at": NOW}
    assert S in lifecycle.FINISHED
    arrival = lifecycle.arrive(State(status=S, due_at=DUE, delivery_count=1), attempt=0, now=NOW)
    assert arrival == (Arrival.SUPERSEDED, {})
    with pytest.raises(lifecycle.IllegalTransition):
        lifecycle.supersede(State(status=D, due_at=DUE), now=NOW)  # handed over: a new window, not a supersede


def test_sql_list_is_sorted_literals_of_the_enum():
    assert lifecycle.sql_list(lifecycle.IN_FLIGHT) == "'pending', 'published'"
    assert lifecycle.sql_list(lifecycle.ORDER_OPEN_VALUES) == "'pending', 'published', 'waiting'"
    assert lifecycle.sql_list(["waiting", Status.DELIVERED]) == "'delivered', 'waiting'"
    with pytest.raises(ValueError):  # only the lifecycle's words reach raw SQL
        lifecycle.sql_list(["delivered'; DROP TABLE x; --"])


_SQL = re.compile(r"\b(SELECT|UPDATE|INSERT INTO|DELETE FROM|WHERE)\b")
_STATUS_LITERAL = re.compile("'({})'".format("|".join(s.value for s in Status)))


def sql_status_literals(source: str) -> list[str]:
    """Status words written as SQL literals ('delivered') in a module's raw SQL strings: the
    constant text of each string or f-string (its {expressions} left out) that reads as SQL."""
    found, tree = [], ast.parse(source)
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        if id(node) in parts:  # read with its f-string
            continue
        if isinstance(node, ast.JoinedStr):
            text = "{}".join(str(part.value) if isinstance(part, ast.Constant) else "" for part in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if _SQL.search(text):
            found += [f"{node.lineno}: {m.group(0)}" for m in _STATUS_LITERAL.finditer(text)]
    return found


def test_the_check_finds_a_status_literal_in_sql():
    assert sql_status_literals('Q = "UPDATE t SET status = \'delivered\' WHERE id = %s"') == ["1: 'delivered'"]
    assert sql_status_literals('Q = f"SELECT 1 FROM t WHERE status IN (\'pending\', {x})"') == ["1: 'pending'"]
    assert sql_status_literals('Q = f"SELECT 1 FROM t WHERE status = \'{Status.PENDING.value}\'"') == []
    assert sql_status_literals('E = "\'pending\' is a status"') == []  # not SQL


def test_raw_sql_takes_its_statuses_from_the_lifecycle():
    """Migrations are history (frozen as they ran); everything else writes a status by name."""
    found = [f"{path.relative_to(ROOT)}:{hit}" for path in sorted((ROOT / "scheduling").rglob("*.py"))
             if "migrations" not in path.parts for hit in sql_status_literals(path.read_text())]
    assert found == []
