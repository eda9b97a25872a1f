"""A receiver that never finishes: it reads the request, starts a 200 answer that announces a
megabyte and sends one byte of it every ``every`` seconds (a per-read timeout never fires; only a
deadline over the whole call ends it). Counts the requests it took."""

from __future__ import annotations

import socket
import threading


class TarpitServer:
    def __init__(self, every: float = 5.0):
        self.every = every
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/tarpit"
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                with self.lock:
                    self.requests += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
                while not self.stopping.wait(self.every):
                    conn.sendall(b"x")
            except OSError:
                return
