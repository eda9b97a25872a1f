"""A webhook destination that records what it is sent: the far end of a delivery, for the tests
that check what the platform posts (and how it retries when the destination fails)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Listening(ThreadingHTTPServer):
    """socketserver listens with a backlog of 5: a sender opening 64 connections at once (the webhook
    engine's bulkhead) had the rest of its connects dropped and retried by the kernel 1, 3, 7 s
    later, on a busy machine past a call's deadline, so a call timed out and was retried while its
    first request was still on the way, and arrived after its retry."""

    request_queue_size = 1024


class RecordingServer:
    """A local HTTP/1.1 server (keep-alive) that records every POST with the client's address
    (``peer``: how many connections a sender used) and when it came (``at``, monotonic seconds);
    ``fail_first`` answers 500 that many times; ``answer`` (status, headers) replaces the 200 (a
    redirect, say); ``hold_seconds`` keeps each request that long before answering, and
    ``most_in_flight`` is the most requests it held at once (flow control's concurrency, counted
    here, where the calls arrive; each request's ``ended`` is when its answer was about to go);
    ``body`` is what each answer carries; ``failure`` what the
    ``fail_first`` answers are (a 429 with Retry-After, say); ``key_of`` names each request's key (from
    its body): ``most_in_flight_by`` is then the most requests of each key it held at once."""

    def __init__(self, fail_first: int = 0, answer: tuple[int, dict] = (200, {}), hold_seconds: float = 0,
                 body: bytes = b"", failure: tuple[int, dict] = (500, {}), key_of=None):
        self.requests: list[dict] = []
        self.in_flight_by: dict = {}
        self.most_in_flight_by: dict = {}
        self.fail_first = fail_first
        self.answer_body = body
        self.in_flight = self.most_in_flight = 0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = key_of(body) if key_of else None
                with lock:
                    recorder.in_flight += 1
                    recorder.most_in_flight = max(recorder.most_in_flight, recorder.in_flight)
                    if key_of:
                        now = recorder.in_flight_by[key] = recorder.in_flight_by.get(key, 0) + 1
                        recorder.most_in_flight_by[key] = max(recorder.most_in_flight_by.get(key, 0), now)
                    request = {"path": self.path, "headers": dict(self.headers), "body": body,
                               "peer": self.client_address, "at": time.monotonic()}
                    recorder.requests.append(request)
                    failing = recorder.fail_first > 0
                    recorder.fail_first -= 1 if failing else 0
                if hold_seconds:
                    time.sleep(hold_seconds)
                with lock:
                    recorder.in_flight -= 1
                    if key_of:
                        recorder.in_flight_by[key] -= 1
                    request["ended"] = time.monotonic()
                status, headers = failure if failing else answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(recorder.answer_body)))
                self.end_headers()
                self.wfile.write(recorder.answer_body)

            def log_message(self, *args):
                pass

        lock = threading.Lock()
        self.server = _Listening(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def unread_by_kernel(self) -> int:
        """Bytes and connections the kernel holds for this server that it has not taken yet: the
        listening socket's accept queue plus what its connections have received and it has not read
        (Linux's /proc/net/tcp). A request a sender wrote before it died sits there until the
        server's threads get a core, for as long as a busy machine keeps them from one."""
        port = f"{self.server.server_port:04X}"
        waiting = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                local, state, queues = fields[1], fields[3], fields[4]
                if local.rsplit(":", 1)[1] == port and state in ("0A", "01"):  # LISTEN, ESTABLISHED
                    waiting += int(queues.split(":")[1], 16)  # rx_queue: the accept queue, or unread bytes
        return waiting

    def connections(self) -> int:
        return len({r["peer"] for r in self.requests})

    def bodies(self) -> list:
        return [json.loads(r["body"]) for r in self.requests]
