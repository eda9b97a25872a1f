"""Judging every accepted message over the table and the archive together (tests/reliability/soak/ledger.py)."""

from datetime import datetime, timedelta, timezone

import pyarrow as pa

from tests.reliability.soak.ledger import SCHEMA, Ledger, judge, with_place

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


def rows(*items, archived=False):
    """items: (id, status, due offset s, delivered offset s or None, lateness ms or None)."""
    columns = list(zip(*[(i, s, T0 + timedelta(seconds=d), None if at is None else T0 + timedelta(seconds=at), late)
                         for i, s, d, at, late in items]))
    return with_place(pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, SCHEMA)], schema=SCHEMA),
                      archived)


def snapshot(live, archived):
    return pa.concat_tables([live, archived])


def test_a_message_is_found_in_either_place_and_lost_only_if_in_neither_finished():
    live = rows(("a", "delivered", 10, 10.005, 5), ("b", "published", 20, None, None), ("c", "failed", 5, None, None))
    archive = rows(("d", "delivered", 1, 1.002, 2), ("e", "cancelled", 30, None, None), archived=True)
    accepted = pa.array(["a", "b", "c", "d", "e", "f"])  # f: in neither place
    o = judge(snapshot(live, archive), accepted, pa.array([], pa.string()), overdue_before=T0 + timedelta(seconds=60))
    assert (o.rows, o.archived, o.delivered, o.cancelled, o.failed, o.unfinished) == (5, 2, 2, 1, 1, 1)
    assert (o.missing, o.not_finished) == (1, 3)  # f missing; b unfinished, c failed
    assert o.overdue == 3  # f, c, and b (due 20 s, 60 s ago by then)
    assert judge(snapshot(live, archive), accepted, pa.array([], pa.string()), overdue_before=T0).overdue == 2


def test_early_is_a_delivery_before_due_in_the_table_or_the_archive():
    live = rows(("a", "delivered", 10, 9.999, -1))
    archive = rows(("b", "delivered", 10, 9.5, None), ("c", "delivered", 10, 10.0, 0), archived=True)
    o = judge(snapshot(live, archive), pa.array(["a", "b", "c"]), pa.array([], pa.string()), overdue_before=T0)
    assert o.early == 2 and o.not_finished == 0


def test_a_message_in_both_places_or_unknown_to_the_driver_is_counted():
    live = rows(("a", "delivered", 1, 1.1, 100), ("x", "delivered", 1, 1.1, 100))
    archive = rows(("a", "delivered", 1, 1.1, 100), archived=True)
    o = judge(snapshot(live, archive), pa.array(["a"]), pa.array([], pa.string()), overdue_before=T0)
    assert (o.duplicates, o.unknown) == (1, 1)


def test_a_cancel_answered_200_must_not_be_delivered_and_a_409_is_a_delivery():
    ledger = Ledger()
    ledger.accepted(["a", "b", "c"])
    ledger.cancel_answered("a", 200)
    ledger.cancel_answered("b", 409)  # the delivery won the race: delivered, not lost
    ledger.cancel_answered("c", 200)
    live = rows(("a", "cancelled", 5, None, None), ("b", "delivered", 1, 1.01, 10), ("c", "delivered", 1, 1.01, 10))
    o = judge(live, ledger.ids(), ledger.cancelled_ids(), overdue_before=T0)
    assert o.delivered_after_cancel == 1 and o.not_finished == 0
    assert ledger.cancel_answers == {"200": 2, "409": 1} and ledger.scheduled == 3


def test_lateness_of_a_window_only():
    live = rows(("a", "delivered", 0, 0.010, 10), ("b", "delivered", 100, 100.020, 20))
    archive = rows(("c", "delivered", 50, 50.030, 30), archived=True)
    o = judge(snapshot(live, archive), pa.array(["a", "b", "c"]), pa.array([], pa.string()), overdue_before=T0,
              window=(T0 + timedelta(seconds=1), T0 + timedelta(seconds=100.5)))
    assert sorted(o.window_lateness_ms) == [20, 30]
