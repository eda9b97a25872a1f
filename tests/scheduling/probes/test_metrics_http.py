"""Serving the metrics: /metrics (the Django view) and a worker's metrics server, who may read
them, and the sum over processes in multiprocess mode. The figures from the database and the
broker are a fake reading here (test_metrics_figures.py reads the real ones)."""

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

from harness.ports import free_port
from scheduling.messages.selectors import Outbox
from scheduling.observability import metrics
from scheduling.observability.metrics_dir import ENV
from scheduling.probes import metrics_figures
from scheduling.probes.metrics_figures import CachedFigures, Figures
from scheduling.probes.metrics_http import registry, serve


def parsed(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(autouse=True)
def fake_figures(monkeypatch):
    reading = Figures(taken_at=time.time(), versions=["v3"], outbox=Outbox({"v3": 7}, None), overdue={"v3": 2})
    monkeypatch.setattr(metrics_figures, "_cached", CachedFigures(15, read=lambda: reading))
    monkeypatch.setattr(metrics_figures, "cached_figures", lambda: metrics_figures._cached)


def test_metrics_answers_prometheus_with_counters_and_figures(client):
    metrics.DELIVERIES.labels("shop", "ep-http-view", "v3").inc(3)
    response = client.get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=")
    found = parsed(response.content.decode())
    assert found[("delay_deliveries_total", (("endpoint", "ep-http-view"), ("team", "shop"), ("version", "v3")))] >= 3
    assert found[("delay_outbox_pending_messages", (("version", "v3"),))] == 7
    assert found[("delay_overdue_messages", (("version", "v3"),))] == 2


def test_metrics_refuses_a_client_outside_the_allowed_networks(client, settings):
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403 and b"delay_" not in response.content
    settings.DELAY_METRICS_ALLOWED_NETWORKS = ["203.0.113.0/24"]
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 200
    assert client.get("/metrics").status_code == 403  # 127.0.0.1 is no longer listed


def test_metrics_asks_for_the_bearer_token_when_one_is_set(client, settings):
    settings.DELAY_METRICS_TOKEN = "scrape-secret"
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200


@pytest.mark.parametrize("header", ["HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP"])
def test_a_forwarded_request_reads_the_metrics_only_with_the_token(client, settings, header):
    """Behind a TLS proxy on the same host every request comes from 127.0.0.1: one the proxy
    forwards for a public client is refused unless a token is set, and then needs it."""
    metrics.DELIVERIES.labels("shop", "ep-forwarded", "v3").inc()
    settings.DELAY_METRICS_TOKEN = ""
    forwarded = {header: "for=203.0.113.9" if header == "HTTP_FORWARDED" else "203.0.113.9"}
    refused = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **forwarded)
    assert refused.status_code == 403 and b"ep-forwarded" not in refused.content
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200  # a local scraper, as before
    settings.DELAY_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", **forwarded).status_code == 401
    allowed = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer scrape-secret", **forwarded)
    assert allowed.status_code == 200 and b"ep-forwarded" in allowed.content


def get(url, token=None, headers=None):
    request = urllib.request.Request(url, headers={**({"Authorization": f"Bearer {token}"} if token else {}),
                                                   **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_worker_serves_its_counters_without_the_figures_and_with_the_same_guard(settings):
    metrics.RELAY_PUBLISHED.labels("v-worker-http").inc(2)
    port = free_port()
    server = serve("127.0.0.1", port)
    try:
        status, text = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        found = parsed(text)
        assert found[("delay_relay_published_total", (("version", "v-worker-http"),))] >= 2
        assert not any(name == "delay_outbox_pending_messages" for name, _ in found)  # the web's only
        assert get(f"http://127.0.0.1:{port}/metrics", headers={"X-Forwarded-For": "203.0.113.9"})[0] == 403
        settings.DELAY_METRICS_TOKEN = "scrape-secret"
        assert get(f"http://127.0.0.1:{port}/metrics", "scrape-secret", {"X-Real-IP": "203.0.113.9"})[0] == 200
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 401
        assert get(f"http://127.0.0.1:{port}/metrics", "scrape-secret")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(OSError):  # two workers on one port: the second is told, not silently absent
        blocker = serve("127.0.0.1", port)
        try:
            serve("127.0.0.1", port)
        finally:
            blocker.shutdown()
            blocker.server_close()


def test_in_multiprocess_mode_a_scrape_sums_every_processs_counts(tmp_path, monkeypatch):
    """What gunicorn's workers and a Celery worker's children leave in the directory, summed."""
    key = mmap_key("delay_deliveries", "delay_deliveries_total", ["team", "endpoint", "version"],
                   ["shop", "ep-mp", "v3"], metrics.DELIVERIES._documentation)
    for pid, count in ((111, 2.0), (222, 3.0)):
        store = MmapedDict(str(tmp_path / f"counter_{pid}.db"))
        store.write_value(key, count, 0.0)
        store.close()
    monkeypatch.setenv(ENV, str(tmp_path))
    from prometheus_client import generate_latest

    found = parsed(generate_latest(registry(figures=False)).decode())
    assert found[("delay_deliveries_total", (("endpoint", "ep-mp"), ("team", "shop"), ("version", "v3")))] == 5
