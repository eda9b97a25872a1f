"""The webhook receiver the tests count calls on: what the kernel still holds for it is seen, so a
test can wait until a killed sender's last request has been taken (tests/e2e/test_webhook_engine.py)."""

import socket

from harness.recording_server import RecordingServer
from harness.waiting import wait_until

REQUEST = b"POST /hook HTTP/1.1\r\nHost: x\r\nwebhook-id: m-1\r\nContent-Length: 2\r\n\r\n{}"


def test_a_request_the_server_has_not_taken_is_counted_until_it_is_taken():
    server = RecordingServer()  # listening, its threads not started: nothing is accepted yet
    sender = socket.create_connection(("127.0.0.1", server.server.server_port))
    try:
        sender.sendall(REQUEST)
        sender.close()  # the sender is gone; its request waits in the kernel
        wait_until(lambda: server.unread_by_kernel() > 0, 5, 0.01, "the connection in the accept queue")
        assert server.requests == []
        with server:
            wait_until(lambda: server.unread_by_kernel() == 0 and len(server.requests) == 1, 10, 0.01,
                       "the request taken")
        assert server.requests[0]["headers"]["webhook-id"] == "m-1"
    finally:
        server.server.server_close()
