"""Readiness of a web process's dependencies, for ``/readyz`` (scheduling/probes/health_views.py).

Three parts: the database answers ``SELECT 1``; the broker's vhost takes a connection; the
default version's cascade (DELAY_DEFAULT_VERSION) is recorded provisioned and its exchanges and
queues exist (passive declares, no management API). The whole check runs in a helper thread
joined with a deadline, so a hanging database or broker costs a probe at most
DELAY_READYZ_TIMEOUT_SECONDS; the answer is kept DELAY_READYZ_CACHE_SECONDS so a load balancer
polling every second does not open a broker connection every second. What a failure says is
short and safe to show anyone (no host names, no URLs); the details go to the log.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from django.core.signals import setting_changed
from django.db import DatabaseError, connection, connections

import rabbit
from scheduling.config.conf import broker, conf, configured_version
from scheduling.versions.selectors import topology_version_get
from topology import cascade

log = logging.getLogger(__name__)
PARTS = ("database", "broker", "cascade")


@dataclass
class Readiness:
    checks: dict[str, str] = field(default_factory=dict)  # part -> "ok", or why not
    failed: dict[str, str] = field(default_factory=dict)  # the parts that failed (not those skipped)

    @property
    def ok(self) -> bool:
        return not self.failed and all(self.checks.get(part) == "ok" for part in PARTS)

    def as_json(self) -> dict:
        body = {"status": "ok" if self.ok else "unavailable", "checks": dict(self.checks)}
        if self.failed:
            body["failed"] = dict(self.failed)
        return body

    def fail(self, part: str, why: str) -> None:
        self.checks[part] = self.failed[part] = why

    def skip(self, part: str, needs: str) -> None:
        self.checks[part] = f"not checked (needs the {needs})"


def _cascade_names(version: cascade.Version) -> tuple[list[str], list[str]]:
    plan = cascade.cascade_plan(version)
    return [e.name for e in plan.exchanges], [q.name for q in plan.queues]


def _check(result: Readiness) -> None:
    """Fill ``result`` part by part (a deadline may read it half-filled)."""
    settings = conf()
    name = settings.default_version
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        row = topology_version_get(name=name)
        result.checks["database"] = "ok"
    except DatabaseError as exc:
        log.warning("readyz: database unavailable: %s", exc)
        result.fail("database", f"unavailable ({type(exc).__name__})")
        row = None
    provisioned = row is not None and row.provisioned_at is not None
    exchanges, queues = _cascade_names(configured_version(name, prefix=row.prefix, levels=row.levels)) \
        if provisioned else ([], [])
    try:
        missing = broker().probe(exchanges=exchanges, queues=queues, timeout=settings.readyz_timeout_seconds)
        result.checks["broker"] = "ok"
    except rabbit.BrokerError as exc:
        log.warning("readyz: broker unavailable: %s", exc)
        result.fail("broker", "unavailable (cannot connect to the vhost)")
        missing = None
    if "database" in result.failed:
        result.skip("cascade", "database")
    elif not provisioned:
        result.fail("cascade", f"{name} is not provisioned: run manage.py provision_delays --version {name}")
    elif missing is None:
        result.skip("cascade", "broker")
    elif missing:
        log.warning("readyz: cascade %s incomplete on the broker, missing: %s", name, ", ".join(missing))
        result.fail("cascade", f"{name} is incomplete on the broker (missing {', '.join(missing)}): "
                               f"run manage.py provision_delays --version {name}")
    else:
        result.checks["cascade"] = "ok"


def check_now() -> Readiness:
    """Run the check in a helper thread and wait at most the deadline; a part still running
    then is reported as not answering in time."""
    result = Readiness()
    deadline = conf().readyz_timeout_seconds

    def run():
        try:
            _check(result)
        except Exception as exc:  # never let a probe answer 500
            log.exception("readyz: check failed")
            result.fail(next((p for p in PARTS if p not in result.checks), "cascade"), type(exc).__name__)
        finally:
            connections.close_all()  # this thread's own database connection

    worker = threading.Thread(target=run, name="dp-readyz", daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(deadline + 0.5)  # the parts have their own timeouts; this is the backstop
    if worker.is_alive():
        stuck = next((p for p in PARTS if p not in result.checks), "cascade")
        log.warning("readyz: %s did not answer within %.1f s", stuck, time.monotonic() - started)
        return Readiness(checks={**result.checks, stuck: f"no answer within {deadline:g} s"},
                         failed={**result.failed, stuck: f"no answer within {deadline:g} s"})
    return result


_lock = threading.Lock()
_cached: tuple[float, Readiness] | None = None


def readiness() -> Readiness:
    """The last answer if it is recent enough, else a new check. Concurrent requests wait for
    the one check that runs and share its answer."""
    global _cached
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < conf().readyz_cache_seconds:
            return _cached[1]
        result = check_now()
        _cached = (time.monotonic(), result)
        return result


def forget(**kwargs) -> None:
    """Drop the cached answer (settings changed, or a test wants a fresh check)."""
    global _cached
    _cached = None


setting_changed.connect(forget, dispatch_uid="scheduling.probes.health")
