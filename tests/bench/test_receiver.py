"""The benchmarks' webhook receiver (bench/receiver.py), on its own: it answers and counts calls
from several processes on one port, notes each call's webhook-id, holds calls in the slow mode,
never finishes an answer in the tarpit mode, and says what its processes cost."""

import http.client
import socket
import time

from bench.cases.isolation import lateness
from bench.receiver import Receiver, rate


def post(port: int, ids: list[str], conn=None) -> list[int]:
    """POST on one kept-alive connection, one request per id: the statuses."""
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses = []
    for message_id in ids:
        conn.request("POST", "/hook", b'{"n": 1}', {"Content-Type": "application/json", "webhook-id": message_id})
        response = conn.getresponse()
        assert response.read() == b""
        statuses.append(response.status)
    return statuses


def test_it_answers_counts_and_notes_ids_across_processes():
    with Receiver(processes=2) as receiver:
        assert len(set(receiver.pids)) == 2
        ids = [f"msg-{i}" for i in range(50)]
        for start in range(0, 50, 10):  # a connection each: SO_REUSEPORT spreads them
            assert post(receiver.port, ids[start:start + 10]) == [200] * 10
        assert receiver.count() == 50
        arrivals = receiver.arrivals()
        assert sorted(i for _, i in arrivals) == sorted(ids)
        assert [t for t, _ in arrivals] == sorted(t for t, _ in arrivals)
        assert receiver.status()["connections"] == 5
        assert receiver.cpu_seconds() >= 0
        receiver.reset()
        assert receiver.count() == 0 and receiver.arrivals() == []


def test_pipelined_requests_in_one_write_are_each_answered():
    with Receiver(processes=1) as receiver:
        request = (b"POST /hook HTTP/1.1\r\nHost: x\r\nWebhook-Id: A%d\r\nContent-Length: 2\r\n\r\n{}")
        with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as sock:
            sock.sendall(b"".join(request % i for i in range(3)))
            answer = b""
            while answer.count(b"200 OK") < 3:
                answer += sock.recv(4096)
        assert sorted(i for _, i in receiver.arrivals()) == ["a0", "a1", "a2"]  # header values lower-cased


def test_the_slow_mode_holds_each_call_and_can_be_made_fast():
    with Receiver("slow", processes=1, hold_s=0.3) as receiver:
        started = time.monotonic()
        assert post(receiver.port, ["x"]) == [200]
        assert time.monotonic() - started >= 0.3
        receiver.set_mode("ok")
        started = time.monotonic()
        assert post(receiver.port, ["y"]) == [200]
        assert time.monotonic() - started < 0.25
        assert receiver.status()["most_in_flight"] == 1


def test_the_tarpit_trickles_and_never_finishes():
    with Receiver("tarpit", processes=1, trickle_s=0.2) as receiver:
        with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as sock:
            sock.sendall(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            got, started = b"", time.monotonic()
            while time.monotonic() - started < 1.1:
                got += sock.recv(10)
            assert got.startswith(b"HTTP/1.1 200 OK"[:len(got)]) and 3 <= len(got) <= 8  # a byte every 0.2 s
            assert b"\r\n\r\n" not in got
            assert receiver.status()["in_flight"] == 1
        time.sleep(0.3)
        assert receiver.status() | {"connections": 1} == {"count": 1, "in_flight": 0, "most_in_flight": 1,
                                                         "connections": 1}


def test_rate_and_lateness():
    assert rate([10.0, 10.5, 11.0]) == 2.0
    assert rate([1.0]) is None
    arrivals = [(10.1, "a"), (10.2, "a"), (12.0, "b")]
    late = lateness(arrivals, {"a": 10.0, "b": 11.0, "c": 11.0}, until=13.0)
    assert (late["messages"], late["missing"], late["duplicates"], late["early"]) == (3, 1, 1, 0)
    assert late["p50"] == 1000 and round(late["max"]) == 2000  # c counts as late as it has waited
