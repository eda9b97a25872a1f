"""Webhook keep-alive (handlers._Sessions): one kept connection per thread and origin, new
connections (checked by the guard) when the allowed networks change, after the maximum age and
after a failed call. Against a real local HTTP/1.1 server."""

import threading

import pytest

from harness.recording_server import RecordingServer
from scheduling.config.conf import conf
from scheduling.delivery import handlers
from scheduling.security.guards import TargetRefused


@pytest.fixture
def sessions(settings):
    settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = "127.0.0.1/32"
    kept = handlers._Sessions()
    yield kept
    for session, _ in kept.kept.values():
        session.close()


def networks():
    """What a call of the default team may reach: the platform's setting (the team grants none)."""
    return tuple(conf().webhook_allowed_networks)


def post(sessions, url, n=1):
    for _ in range(n):
        assert sessions.get(url, networks()).post(url, data=b"{}", timeout=5).status_code == 200


def test_calls_to_one_origin_share_one_connection(sessions):
    with RecordingServer() as server:
        post(sessions, server.url, 5)
    assert len(server.requests) == 5 and server.connections() == 1


def test_each_thread_keeps_its_own_connection(sessions):
    with RecordingServer() as server:
        threads = [threading.Thread(target=post, args=(sessions, server.url, 3)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 6 and server.connections() == 2


def test_changed_allowed_networks_open_a_new_checked_connection(sessions, settings):
    with RecordingServer() as server:
        post(sessions, server.url)
        settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = "10.0.0.0/8"  # 127.0.0.1 no longer allowed
        with pytest.raises(TargetRefused, match="allow its network"):  # not the kept connection: a new, checked one
            sessions.get(server.url, networks()).post(server.url, data=b"{}", timeout=5)
        settings.DELAY_WEBHOOK_ALLOWED_NETWORKS = "127.0.0.0/8"
        post(sessions, server.url)
    assert len(server.requests) == 2 and server.connections() == 2


def test_an_old_session_is_closed_and_the_name_checked_again(sessions, monkeypatch):
    with RecordingServer() as server:
        post(sessions, server.url)
        monkeypatch.setattr(handlers, "SESSION_MAX_AGE_SECONDS", 0.0)
        post(sessions, server.url)
    assert server.connections() == 2


def test_a_thread_keeps_at_most_the_bound_of_origins(sessions, monkeypatch):
    monkeypatch.setattr(handlers, "SESSIONS_PER_THREAD", 2)
    servers = [RecordingServer().__enter__() for _ in range(3)]
    try:
        for server in servers:
            post(sessions, server.url)
        assert len(sessions.kept) == 2
    finally:
        for server in servers:
            server.__exit__(None, None, None)


def test_after_a_failed_call_the_origin_gets_a_new_connection(sessions):
    with RecordingServer() as server:
        post(sessions, server.url)
        sessions.drop(server.url)
        post(sessions, server.url)
    assert server.connections() == 2
