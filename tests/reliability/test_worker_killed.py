"""SIGKILL the whole Celery worker three times while deliveries are due: every message is
delivered and its handler ran (a receipt per run), never early; the duplicate hand-overs the
kills cause are counted in delivery_count, and handler runs repeated by a kill between the
handler and the commit (the documented at-least-once window) are counted and reported."""

import time

import pytest

from harness.platform import platform
from harness.waiting import wait_until

from .conftest import FULL, size
from .faults import count_status, endpoint, outcome, schedule, settle

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


@pytest.mark.parametrize("envelopes", ["on", "off"] if FULL else ["on"])
def test_worker_killed_three_times(report, rng, envelopes):
    """On v3 (the default version), with envelopes (a kill leaves some half delivered) and, in
    `make test-reliability`, without (make test has tests/e2e/test_envelopes.py's kill for that)."""
    with platform(web_workers=2, settings="delayplatform.settings_test", DELAY_ENVELOPES=envelopes) as p:
        worker = p.start_worker(concurrency=2)
        name = endpoint(p, "killed")
        n = size(2000, 600)
        schedule(p, name, [round(rng.uniform(3, 25), 3) for _ in range(n)])
        wait_until(lambda: count_status(p, name, "published") + count_status(p, name, "delivered") == n, 60, 0.2)
        for _ in range(3):
            time.sleep(5)
            worker.kill()  # SIGKILL the main process and its pool: nothing is cleaned up
            time.sleep(1)
            worker.start()
        settle(p, name, n, timeout=90)
        counts = report(outcome(p, name, f"worker SIGKILLed 3 times, envelopes {envelopes}"))
    assert counts.lost == 0 and counts.early == 0  # lost includes "delivered, but its handler never ran"
