"""The flow keys' call slots a delivery loop holds, in the real database: a slot per call in flight,
given back by the copy that took it (two copies of one message each their own), nothing kept once
the calls are over."""

from types import SimpleNamespace

from scheduling.worker.key_slots import KeyCallSlots


def copy(message_id: str):
    return SimpleNamespace(delivery=SimpleNamespace(message_id=message_id))


def test_slots_are_taken_per_copy_and_given_back_by_it(transactional_db, endpoint_of):
    endpoint = endpoint_of("v3", handler="webhook", handler_target="http://127.0.0.1:9/", max_concurrent_per_key=2)
    slots = KeyCallSlots()
    first, twin, third, other = copy("m1"), copy("m1"), copy("m3"), copy("m4")
    got, missed = slots.take({(endpoint.pk, "a", 2): [first, twin, third], (endpoint.pk, "b", 2): [other]})
    assert got == [first, twin, other] and missed == [third]  # a's two slots: one each for the two copies
    assert slots.held == {(endpoint.pk, "a"): {0, 1}, (endpoint.pk, "b"): {0}}
    slots.release([twin])  # its row was not taken: its own slot goes back, the first copy keeps its
    assert slots.held[(endpoint.pk, "a")] == {slots.of[id(first)][2]}
    got, missed = slots.take({(endpoint.pk, "a", 2): [third]})
    assert got == [third] and missed == []
    slots.release([first, third, other, copy("never-taken")])
    assert not slots and slots.held == {} and slots.of == {}
    got, _ = slots.take({(endpoint.pk, "a", 2): [copy("x"), copy("y")]})  # all free again
    assert len(got) == 2
    slots.release(got)
