"""The metrics after real deliveries: a real worker (its metrics port scraped over HTTP: the
delivery loop in its main process, Celery tasks claimed in its prefork children), /metrics on a
live server (the API's counts, the database and management API figures) and on gunicorn with two
worker processes (summed, whichever answers). Parsed with prometheus_client's parser.

The worker runs without beat: nothing sweeps, so rows written here stay pending for the outbox
figures and an unroutable message stays in its queue (no drain)."""

import os
import re
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from harness.celery_worker import Worker
from harness.paths import ARTIFACTS, ROOT
from harness.ports import free_port
from harness.recording_server import RecordingServer
from harness.testapp.tasks import plain_receipt
from harness.waiting import wait_until
from scheduling.celery import schedule_task
from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage, Team
from scheduling.teams.services import api_key_create

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]
Status = ScheduledMessage.Status


def scrape(url: str, token: str | None = None) -> dict:
    """(name, sorted labels) -> value, of every sample the endpoint serves."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def metrics_worker(worker_env):
    """A worker serving metrics on a port of its own, as it starts by default: no
    PROMETHEUS_MULTIPROC_DIR given, it makes its own directory (and removes it when it stops)."""
    port = free_port()
    run_id = os.environ["DP_TEST_RUN_ID"]
    env = {**worker_env, "DELAY_WORKER_METRICS_PORT": str(port), "DELAY_HANDLER_BACKOFF_SECONDS": "3"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    w = Worker(f"metrics-{run_id}", env, ARTIFACTS / f"worker-{run_id}-metrics.log", beat=False).start()
    w.metrics_url = f"http://127.0.0.1:{port}/metrics"
    served = wait_until(lambda: re.search(rf"worker metrics on http://127\.0\.0\.1:{port}/metrics \(every process's "
                                          r"counts in (\S+)\)", w.log_text()), 10, message="the worker's metrics server")
    w.metrics_dir = Path(served.group(1))
    yield w
    w.stop()
    assert not w.metrics_dir.exists(), "the worker left its metrics directory behind"


def make_endpoint(api, name, **body):
    response = api.post("/api/endpoints/", {"name": name, "topology": "v3", **body}, format="json")
    assert response.status_code == 201, response.content
    return name


def schedule(api, endpoint, **body):
    response = api.post("/api/messages/", {"endpoint": endpoint, "payload": {}, **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def delivered(ids):
    return lambda: ScheduledMessage.objects.filter(id__in=ids, status=Status.DELIVERED).count() == len(ids)


def test_the_worker_counts_deliveries_lateness_failures_retries_and_held_messages(
        api, team_key, platform, metrics_worker, endpoint_name):
    """The plain endpoint is another team's (its key made it there): the labels name that team."""
    shop = team_key("metrics-shop")
    name = make_endpoint(shop, endpoint_name)
    ids = [schedule(shop, name, delay_seconds=delay) for delay in (0, 0, 0.5, 1, 1.5)]
    ids.append(schedule(shop, name, deliver_at=(timezone.now() - timedelta(hours=1)).isoformat()))
    wait_until(delivered(ids), 20, message="six deliveries")
    labels = {"team": "metrics-shop", "endpoint": name, "version": "v3"}
    found = wait_until(lambda: (s := scrape(metrics_worker.metrics_url))
                       and of(s, "delay_deliveries_total", **labels) == 6 and s, 5,
                       message="six deliveries counted")
    assert of(found, "delay_delivery_lateness_seconds_count", **labels) == 6
    assert of(found, "delay_delivery_lateness_seconds_bucket", **labels, le="+Inf") == 6
    # the backdated one is late by the platform's time, not by the hour it was backdated
    assert of(found, "delay_delivery_lateness_seconds_bucket", **labels, le="60.0") == 6
    assert of(found, "delay_duplicates_suppressed_total", **labels) == 0
    assert of(found, "delay_deliveries_total", team="default", endpoint=name, version="v3") == 0

    with RecordingServer(fail_first=1) as receiver:
        hook = make_endpoint(api, endpoint_name + "-hook", team="default", handler="webhook",
                             handler_target=receiver.url)
        message_id = schedule(api, hook, delay_seconds=0)
        # the retry waits its 3 s backoff held by the delivery loop
        wait_until(lambda: of(scrape(metrics_worker.metrics_url), "delay_delivery_loop_held_messages") >= 1, 10,
                   interval=0.05, message="the retry held by the loop")
        wait_until(delivered([message_id]), 20, message="the retry delivered")
        assert ScheduledMessage.objects.get(id=message_id).attempts == 1 and len(receiver.requests) == 2
    found = scrape(metrics_worker.metrics_url)
    hook_labels = {"team": "default", "endpoint": hook, "version": "v3"}
    assert of(found, "delay_handler_failures_total", **hook_labels) == 1
    assert of(found, "delay_handler_retries_total", **hook_labels) == 1
    assert of(found, "delay_deliveries_total", **hook_labels) == 1  # the retry is not a second delivery
    wait_until(lambda: of(scrape(metrics_worker.metrics_url), "delay_delivery_loop_held_messages") == 0, 5,
               message="nothing held any more")


def test_tasks_claimed_in_prefork_children_are_counted_by_the_worker(platform, metrics_worker, settings):
    settings.DELAY_DEFAULT_VERSION = "v3"
    before = of(scrape(metrics_worker.metrics_url), "delay_deliveries_total", team="default", endpoint="celery",
                version="v3")
    results = [schedule_task(plain_receipt, args=[n], countdown=0) for n in range(3)]
    wait_until(lambda: ScheduledMessage.objects.filter(idempotency_key__in=[r.id for r in results],
                                                       status=Status.DELIVERED).count() == 3, 20,
               message="three tasks claimed")
    wait_until(lambda: of(scrape(metrics_worker.metrics_url), "delay_deliveries_total", team="default",
                          endpoint="celery", version="v3") == before + 3, 5,
               message="three claims counted across the children")
    # the children counted into the worker's directory, each in files of its own pid
    pids = {path.stem.rsplit("_", 1)[1] for path in metrics_worker.metrics_dir.glob("counter_*.db")}
    assert len(pids) >= 2, pids


def test_web_metrics_count_cancellations_relay_publishes_and_read_the_figures(
        api, platform, metrics_worker, endpoint_name, live_server, settings, amqp):
    settings.DELAY_METRICS_CACHE_SECONDS = 0.2  # this test waits for new figures, not 15 s
    web = f"{live_server.url}/metrics"
    name = make_endpoint(api, endpoint_name)
    before = scrape(web)
    labels = {"team": "default", "endpoint": name, "version": "v3"}
    waiting = schedule(api, name, delay_seconds=600)  # in the cascade's levels for ten minutes
    assert api.post(f"/api/messages/{waiting}/cancel/").status_code == 200
    schedule(api, name, deliver_at=(timezone.now() - timedelta(minutes=1)).isoformat())
    # rows no relay will publish here (no sweeper): the outbox; and one overdue past the report's grace
    endpoint = Endpoint.objects.get(name=name)
    now = timezone.now()
    for age in (90, 5):
        ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, requested_delay_ms=0,
                                        status=Status.PENDING, due_at=now + timedelta(hours=1),
                                        created_at=now - timedelta(seconds=age))
    ScheduledMessage.objects.create(endpoint=endpoint, topology=endpoint.topology, payload={}, requested_delay_ms=0,
                                    status=Status.PUBLISHED, due_at=now - timedelta(minutes=11),
                                    created_at=now - timedelta(minutes=12))
    # an endpoint with no queue bound: its message ends in v3's unroutable queue (no drain runs here)
    unbound = Endpoint.objects.create(name=endpoint_name + "-unbound", queue=endpoint_name + "-unbound", topology=platform["v3"],
                                      delivery_mode=DeliveryMode.NATIVE)
    schedule(api, unbound.name, delay_seconds=0)

    def in_levels(found):
        return {dict(labels_)["level"]: value for (metric, labels_), value in found.items()
                if metric == "delay_in_flight_messages" and dict(labels_)["version"] == "v3"}

    def figures():  # the management API's statistics lag a few seconds
        found = scrape(web)
        return found if (of(found, "delay_outbox_pending_messages", version="v3") == 2
                         and of(found, "delay_unroutable_messages", version="v3")
                         == of(before, "delay_unroutable_messages", version="v3") + 1
                         and in_levels(found).get("09", 0) >= 1) else None

    found = wait_until(figures, 20, interval=0.3, message="the outbox and the unroutable message in the figures")
    assert of(found, "delay_cancellations_total", **labels) - of(before, "delay_cancellations_total", **labels) == 1
    assert of(found, "delay_scheduled_in_past_total", **labels) - of(before, "delay_scheduled_in_past_total",
                                                                      **labels) == 1
    assert of(found, "delay_relay_published_total", version="v3") - of(
        before, "delay_relay_published_total", version="v3") == 3  # waiting, the backdated one, the unbound one
    assert 90 <= of(found, "delay_outbox_oldest_age_seconds") < 120
    assert of(found, "delay_overdue_messages", version="v3") == 1
    assert of(found, "delay_metrics_figures_up", source="database") == 1
    assert of(found, "delay_metrics_figures_up", source="broker") == 1
    # the cancelled message still rides the cascade, in level 09 (600 s: bits 9, 6, 4 and 3) for 512 s
    assert sorted(in_levels(found)) == [f"{level:02d}" for level in range(28)]
    # the worker serves none of the figures: one place reads them
    assert not any(metric == "delay_outbox_pending_messages" for metric, _ in scrape(metrics_worker.metrics_url))


def test_gunicorn_workers_are_summed_whichever_answers(platform, worker_env, endpoint_name):
    """Six scheduling requests over two gunicorn processes with a team's key, then scrapes: every
    scrape says six."""
    team = Team.objects.create(name="metrics-gunicorn")
    key = api_key_create(team=team, scopes=["all"]).key
    Endpoint.objects.create(team=team, name=endpoint_name, queue=f"{team.name}--{endpoint_name}",
                            topology=platform["v2"])
    port = free_port()
    log = open(ARTIFACTS / f"gunicorn-{os.environ['DP_TEST_RUN_ID']}.log", "ab")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "delayplatform.wsgi", "--config", "gunicorn.conf.py",
                               "--bind", f"127.0.0.1:{port}", "--workers", "2"], cwd=ROOT, env=worker_env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{base}/healthz"), 30, interval=0.2, message="gunicorn to answer")
        for _ in range(6):
            request = urllib.request.Request(
                f"{base}/api/messages/", method="POST", data=(
                    f'{{"endpoint": "{endpoint_name}", "payload": {{}}, '
                    f'"deliver_at": "{(timezone.now() - timedelta(seconds=30)).isoformat()}"}}').encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                         "Connection": "close"})
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 201
        counts = [of(scrape(f"{base}/metrics"), "delay_scheduled_in_past_total", team=team.name,
                     endpoint=endpoint_name, version="v2") for _ in range(8)]
        assert counts == [6] * 8
    finally:
        os.killpg(server.pid, 15)
        server.wait(20)


def _answers(url) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:  # refused, reset, or slower than 2 s while the server starts on a busy machine
        time.sleep(0.1)
        return False
