"""The hand-over's named types (delivery/services.py Handover, webhook_calls.CallToken): a copy's
parts by name, a plain tuple in the same order read as one, and a call's token read by name."""

from scheduling.delivery.services import Handover
from scheduling.delivery.webhook_calls import CallToken


def test_a_handover_names_its_parts_and_defaults_the_stamps():
    item = Handover(message_id="m", attempt=2)
    assert (item.message_id, item.attempt, item.due_ms, item.throttled_ms, item.queue) == ("m", 2, None, None, None)


def test_a_plain_tuple_reads_as_a_handover_in_its_order():
    assert Handover(*("m", 1, 1700, 5, "q")) == Handover(message_id="m", attempt=1, due_ms=1700, throttled_ms=5,
                                                         queue="q")
    assert Handover(*("m", 0, None, None)).queue is None


def test_a_call_token_is_read_by_name():
    token = CallToken(held="held", row="row", session=3, slot=None)
    assert (token.held, token.row, token.session, token.slot) == ("held", "row", 3, None)
