"""rabbit.gather.Gatherer, the relay's group commit (no broker here): an item handed to an idle
publisher goes at once; items handed while a batch is out go together in the next; under load the
window waits for items expected, and only then; an error reaches every caller of its batch; a
forked child has its own."""

import os
import threading
import time

import pytest

from rabbit.gather import Gatherer, GatherTimeout


class Recorder:
    """A ``send`` that records its batches and can be held (a slow publish)."""

    def __init__(self):
        self.batches: list[list] = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(self, items):
        self.entered.set()
        self.release.wait(10)
        self.batches.append(list(items))


def gatherer(send, gather_ms=0, enough=1000):
    return Gatherer(send, gather_ms=lambda: gather_ms, enough=lambda: enough, name="test")


def in_threads(function, items):
    threads = [threading.Thread(target=function, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return threads


def test_an_item_handed_to_an_idle_publisher_goes_at_once_even_with_a_window():
    send = Recorder()
    g = gatherer(send, gather_ms=500)
    took = []
    for i in range(20):
        start = time.perf_counter()
        assert g.run(i) == i
        took.append(time.perf_counter() - start)
    assert send.batches == [[i] for i in range(20)]
    assert sorted(took)[10] < 0.05  # the window (500 ms) is never waited at idle: a thread hand-over only


def test_items_handed_while_a_batch_is_out_go_together_in_the_next():
    send = Recorder()
    g = gatherer(send)
    send.release.clear()
    first = in_threads(g.run, ["first"])
    assert send.entered.wait(5)
    rest = in_threads(g.run, list(range(10)))
    time.sleep(0.2)  # all ten are waiting
    send.release.set()
    for thread in first + rest:
        thread.join(10)
    assert send.batches[0] == ["first"]
    assert sorted(send.batches[1]) == list(range(10)) and len(send.batches) == 2
    assert (g.batches, g.items) == (2, 11)


def test_under_load_the_window_waits_for_what_is_expected():
    """A request says it is coming between writing its rows and its commit (expect): under load the
    next batch waits for it, up to the window."""
    send = Recorder()
    g = gatherer(send, gather_ms=300)
    send.release.clear()
    threads = in_threads(g.run, ["first"])
    assert send.entered.wait(5)
    threads += in_threads(g.run, ["during"])  # came while the first batch was out: load
    token = g.expect()  # another request is committing
    time.sleep(0.05)
    send.release.set()
    time.sleep(0.05)
    threads += in_threads(lambda item: g.run(item, token=token), ["expected"])  # within 300 ms of "during"
    for thread in threads:
        thread.join(10)
    assert send.batches == [["first"], ["during", "expected"]]


def test_under_load_nothing_expected_means_no_wait_and_an_expectation_not_met_waits_the_window_only():
    send = Recorder()
    g = gatherer(send, gather_ms=300)
    for expected in (False, True):
        send.release.clear()
        send.entered.clear()
        threads = in_threads(g.run, ["first"])
        assert send.entered.wait(5)
        threads += in_threads(g.run, ["during"])
        if expected:
            g.expect()  # its transaction rolls back: it never comes
        time.sleep(0.05)
        start = time.monotonic()
        send.release.set()
        for thread in threads:
            thread.join(10)
        took = time.monotonic() - start
        assert (took > 0.2) if expected else (took < 0.15), (expected, took)
    assert send.batches == [["first"], ["during"]] * 2


def test_enough_items_waiting_end_the_window_early():
    send = Recorder()
    g = gatherer(send, gather_ms=5000, enough=4)
    send.release.clear()
    threads = in_threads(lambda item: g.run(item, weight=2), ["first"])
    assert send.entered.wait(5)
    threads += in_threads(lambda item: g.run(item, weight=2), ["a", "b"])
    g.expect()  # more would be waited for, but 2 + 2 rows are enough
    time.sleep(0.05)
    start = time.monotonic()
    send.release.set()
    for thread in threads:
        thread.join(10)
    assert time.monotonic() - start < 2  # 2 + 2 rows are enough: the 5 s window was not waited
    assert sorted(send.batches[1]) == ["a", "b"]


def test_an_error_reaches_every_caller_of_its_batch_and_the_publisher_goes_on():
    calls = []

    def send(items):
        calls.append(items)
        if "bad" in items:
            raise RuntimeError("broker exploded")

    g = gatherer(send)
    with pytest.raises(RuntimeError, match="exploded"):
        g.run("bad")
    assert g.run("good") == "good"
    assert calls == [["bad"], ["good"]]


def test_a_caller_that_stops_waiting_is_not_sent_later():
    send = Recorder()
    g = gatherer(send)
    send.release.clear()
    first = in_threads(g.run, ["first"])
    assert send.entered.wait(5)
    with pytest.raises(GatherTimeout):
        g.run("late", timeout=0.1)
    send.release.set()
    first[0].join(10)
    assert g.run("next") == "next"
    assert send.batches == [["first"], ["next"]]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX")
def test_a_forked_child_has_a_publisher_thread_of_its_own():
    """gunicorn forks its workers after the app may have published in the master; Celery forks its
    pool. Forked while another thread holds the lock and a batch is out, the child starts afresh."""
    send = Recorder()
    g = gatherer(send)
    assert g.run("parent") == "parent"
    send.release.clear()
    held = in_threads(g.run, ["held"])
    assert send.entered.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here, nor its batch
        try:
            send.release.set()
            ok = g.run("child", timeout=5) == "child" and g.pid == os.getpid() and send.batches[-1] == ["child"]
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    send.release.set()
    held[0].join(10)
    assert os.waitstatus_to_exitcode(status) == 0
    assert send.batches == [["parent"], ["held"]]  # the child's batch was its own
