"""The platform's settings as one typed object, and the broker they name.

``delayplatform/settings.py`` reads the environment into Django settings (``DELAY_*`` and a
few others); everything in the platform reads them through :func:`conf`, so a name, a type and
a unit are written once. ``override_settings`` in tests works: the object is rebuilt when a
setting changes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

import rabbit
from topology import cascade

from . import guards, metrics_access


@dataclass(frozen=True)
class DelaySettings:
    broker_url: str
    management_url: str  # empty: the broker's host, port 15672
    default_version: str  # cascade of new endpoints (and of commands without --version)
    shards: dict[str, int]  # version name -> shards (DELAY_SHARDS "v3=4,v2=2"; a version not named has 1)
    queue_type: str  # classic or quorum: endpoint queues (and Celery's, in settings)
    arrival_margin_ms: int
    max_payload_bytes: int
    bulk_max: int  # messages per bulk request
    publish_window: int
    publish_batch: int
    sweep_seconds: float
    sweep_grace_seconds: float
    handler_max_retries: int
    handler_backoff_seconds: float
    webhook_timeout_seconds: float
    webhook_concurrency: int
    consumer_sync_seconds: float
    readyz_timeout_seconds: float  # /readyz: each probe's bound (scheduling/health.py)
    readyz_cache_seconds: float  # /readyz: how long an answer is reused
    delivery_loop: bool
    delivery_prefetch: int
    delivery_batch: int
    relay_queue: str
    timeouts_lookahead_ms: int
    celery_threshold_seconds: float
    api_rate: str | None  # per-user API rate, "6000/minute" (a bulk counts its messages); None: off
    max_json_depth: int  # JSON request bodies nest at most this deep
    webhook_allowed_networks: tuple  # ip networks webhooks may reach though guards.py refuses them
    celery_task_allowlist: tuple[str, ...]  # fnmatch patterns of the tasks celery_task endpoints may run
    metrics_token: str  # empty: no bearer token asked of metrics scrapers (networks still checked)
    metrics_allowed_networks: tuple  # ip networks that may read /metrics and the workers' metrics ports
    metrics_cache_seconds: float  # the database and management API figures are read at most this often
    worker_metrics_port: int  # 0: a worker serves no metrics
    worker_metrics_addr: str
    accuracy_report_dir: Path
    spark_master: str
    accuracy_spark_submit: str
    accuracy_lost_after_seconds: float
    retention: timedelta  # delivered and cancelled messages stay in the table this long after they finished
    failed_retention: timedelta  # failed ones (which people may still republish)
    archive_dir: Path  # Parquet, due_date=YYYY-MM-DD/part-*.parquet, listed in ArchiveFile (default: beside the report's)
    archive_payloads: bool
    archive_retention: timedelta | None  # archive days older than this are deleted; None: kept for ever
    prune_batch: int  # rows archived into one file and deleted in one transaction


# field -> Django setting, where the setting's name is not DELAY_<FIELD>
_NAMES = {
    "broker_url": "BROKER_URL",
    "management_url": "RABBITMQ_MANAGEMENT_URL",
    "accuracy_report_dir": "ACCURACY_REPORT_DIR",
    "spark_master": "SPARK_MASTER",
    "accuracy_spark_submit": "ACCURACY_SPARK_SUBMIT",
    "accuracy_lost_after_seconds": "ACCURACY_LOST_AFTER_SECONDS",
}
_AT_LEAST_ONE = ("bulk_max", "publish_window", "publish_batch", "webhook_concurrency", "delivery_prefetch",
                 "delivery_batch", "prune_batch")


def setting_name(field: str) -> str:
    return _NAMES.get(field, f"DELAY_{field.upper()}")


def _read() -> DelaySettings:
    values = {}
    for f in fields(DelaySettings):
        name = setting_name(f.name)
        try:
            value = getattr(settings, name)
        except AttributeError:
            raise ImproperlyConfigured(f"the setting {name} is missing") from None
        values[f.name] = Path(value) if f.type == "Path" and value != "" else value
    values["shards"] = parse_shards(values["shards"])
    if values["archive_dir"] == "":
        values["archive_dir"] = values["accuracy_report_dir"] / "archive"
    try:
        values["webhook_allowed_networks"] = guards.parse_networks(values["webhook_allowed_networks"])
    except ValueError as exc:
        raise ImproperlyConfigured(f"DELAY_WEBHOOK_ALLOWED_NETWORKS: {exc}") from None
    allowlist = values["celery_task_allowlist"]
    values["celery_task_allowlist"] = tuple(p.strip() for p in (allowlist.split(",") if isinstance(allowlist, str)
                                                                 else allowlist) if p.strip())
    try:
        values["metrics_allowed_networks"] = metrics_access.parse_networks(values["metrics_allowed_networks"])
    except ValueError as exc:
        raise ImproperlyConfigured(f"DELAY_METRICS_ALLOWED_NETWORKS: {exc}") from None
    typed = DelaySettings(**values)
    if typed.default_version not in cascade.VERSIONS:
        raise ImproperlyConfigured(
            f"DELAY_DEFAULT_VERSION is {typed.default_version!r}; known versions: {', '.join(cascade.VERSIONS)}"
        )
    for name in _AT_LEAST_ONE:
        if getattr(typed, name) < 1:
            raise ImproperlyConfigured(f"{setting_name(name)} must be at least 1, not {getattr(typed, name)!r}")
    return typed


def parse_shards(value) -> dict[str, int]:
    """``"v3=4,v2=2"`` (or a dict, from tests' settings) -> {"v3": 4, "v2": 2}; one clear line
    for what cannot work: an unknown version, a count that is not a whole number from 1 to 64."""
    if isinstance(value, dict):
        items = [(str(name), count) for name, count in value.items()]
    else:
        items = []
        for item in (part.strip() for part in str(value or "").split(",")):
            if not item:
                continue
            name, equals, count = item.partition("=")
            if not equals:
                raise ImproperlyConfigured(f"DELAY_SHARDS: {item!r} is not VERSION=COUNT (e.g. DELAY_SHARDS=v3=4,v2=2)")
            items.append((name.strip(), count.strip()))
    shards: dict[str, int] = {}
    for name, count in items:
        if name not in cascade.VERSIONS:
            raise ImproperlyConfigured(
                f"DELAY_SHARDS names the unknown version {name!r}; known versions: {', '.join(cascade.VERSIONS)}"
            )
        if name in shards:
            raise ImproperlyConfigured(f"DELAY_SHARDS names {name} twice")
        try:
            number = count if isinstance(count, int) and not isinstance(count, bool) else int(str(count), 10)
        except ValueError:
            raise ImproperlyConfigured(f"DELAY_SHARDS: the shards of {name} must be a whole number, not {count!r}") from None
        if not 1 <= number <= cascade.MAX_SHARDS:
            raise ImproperlyConfigured(
                f"DELAY_SHARDS: {name} may have 1 to {cascade.MAX_SHARDS} shards, not {number}"
            )
        shards[name] = number
    return shards


@functools.cache
def conf() -> DelaySettings:
    return _read()


def configured_version(name: str, *, prefix: str | None = None, levels: int | None = None) -> cascade.Version:
    """The cascade of a version as this platform runs it: the built-in version with the shard
    count DELAY_SHARDS gives it (under another prefix or level count, for a TopologyVersion row
    or a command's --prefix/--levels). Everything that publishes, declares, verifies, explains or
    drains a cascade gets its Version here, so all of them agree on the shards."""
    return _version(name, prefix, levels, conf().shards.get(name, 1))


@functools.lru_cache(maxsize=64)
def _version(name: str, prefix: str | None, levels: int | None, shards: int) -> cascade.Version:
    """Built once per (name, prefix, levels, shards): scheduling asks for it per batch."""
    return cascade.get_version(name).with_(prefix=prefix, levels=levels, shards=shards)


@functools.cache
def _platform_broker(url: str, management_url: str) -> rabbit.Broker:
    return rabbit.Broker(url, management_url)


def broker(url: str | None = None) -> rabbit.Broker:
    """The platform's broker (one instance per process, so the relay keeps its connections), or
    another one by URL (transfer_delays' target, provision_delays --broker)."""
    c = conf()
    if url is None or url == c.broker_url:
        return _platform_broker(c.broker_url, c.management_url)
    return rabbit.Broker(url)


def _reset(**kwargs) -> None:
    conf.cache_clear()


setting_changed.connect(_reset, dispatch_uid="scheduling.conf")
