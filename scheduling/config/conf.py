"""The platform's settings as one typed object, and the broker they name.

Each setting is declared once, in ``scheduling/config/specs.py`` (its variable, parser,
default, check and doc); ``delayplatform/settings.py`` reads the environment through those specs
into Django settings, and :func:`conf` is made from the same specs: one field per spec marked
``conf`` (its class written out below by ``manage.py settings_reference``), read back from Django
settings. A value settings.py parsed is only checked here (a CIDR list is a tuple of networks
already); text, as a test may set it, is parsed as the environment's would be. ``override_settings`` in tests works: the object is rebuilt when a setting changes.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

import rabbit
from scheduling.config import specs
from topology import cascade

_SPECS = tuple(spec for spec in specs.SPECS if spec.conf)

# --- DelaySettings: written from config/specs.py by `manage.py settings_reference` (edit the specs) ---


@dataclass(frozen=True)
class DelaySettings:
    """The platform's settings, read from Django's (conf() below)."""

    tls_proxy_header: str
    """behind a TLS-terminating proxy: the header it sets to `https` (on every request; stripped from
    clients'); failed logins then count against the address the proxy adds to `X-Forwarded-For`"""
    webhook_allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    """CIDRs webhooks may reach although the SSRF guard refuses them, e.g. `127.0.0.1/32` for local
    development ([Security](../security.md#webhook-targets-ssrf-guard))"""
    celery_task_allowlist: tuple[str, ...]
    """fnmatch patterns of the tasks `celery_task` endpoints may run
    ([Security](../security.md#celery-task-allowlist))"""
    secrets_keys: tuple[str, ...]
    """Fernet keys that encrypt webhook signing secrets at rest, comma-separated: the first encrypts, all
    decrypt (rotation: the new key first, `manage.py rotate_secrets_key`, then drop the old;
    [Security](../security.md#webhook-secrets-at-rest))"""
    otel_exporter_otlp_endpoint: str
    """OpenTelemetry's standard variable: the OTLP/HTTP collector's base URL (spans go to
    `<url>/v1/traces`); setting it turns tracing on ([Tracing](../observability/tracing.md))"""
    otel_exporter_otlp_traces_endpoint: str
    """the full URL spans are posted to, instead of the base URL's `/v1/traces`; setting it turns tracing
    on too"""
    otel_traces_exporter: str
    """`otlp` turns tracing on (to `http://localhost:4318` when no endpoint is set); `none` keeps it off
    whatever else is set"""
    otel_service_name: str
    """the `service.name` of the platform's spans (the other `OTEL_*` variables, such as
    `OTEL_TRACES_SAMPLER`, are read by the OpenTelemetry SDK itself)"""
    migration_lock_timeout_ms: int
    """`manage.py migrate` waits at most this long for each lock (PostgreSQL's `lock_timeout`, for migrate
    only; `0`: no limit): a migration that needs a table a long transaction holds fails with one line
    instead of queueing every request behind it ([Upgrades](../operations/upgrades.md#the-lock-timeout))"""
    broker_url: str
    """RabbitMQ (cascade and Celery); a cluster as `amqp://a:5672/v;amqp://b:5672/v;amqp://c:5672/v`
    ([Cluster](../operations/cluster.md))"""
    management_url: str
    """management API, for verify and queue depths; several nodes separated by `;`"""
    broker_connect_timeout_ms: int
    """how long opening a connection to RabbitMQ may take before that node counts as down (the next node of
    a cluster URL is tried; a request that schedules answers 503 once none answered)"""
    queue_type: str
    """type of the endpoint queues and Celery's task queues: `quorum` on a cluster (replicated), `classic`
    what existing brokers have"""
    default_version: str
    """cascade of new endpoints that name none (once it is provisioned; until then the newest provisioned
    version), and of commands run without `--version`"""
    shards: dict[str, int]
    """shards per version: k parallel cascades of a version, 1 to 64, when one quorum queue per level is
    the ceiling ([Shards](../operations/shards.md))"""
    arrival_margin_ms: int
    """how early a message leaves the cascade for the worker's timer (absorbs hop latency: never early)"""
    relay_queue: str
    """the Celery queue of the sweeper, timeout manager and unroutable drain"""
    max_payload_bytes: int
    """largest payload (its JSON) a message may carry"""
    bulk_max: int
    """messages one bulk request may schedule"""
    envelopes: bool
    """v3 (and later versions): the relay sends the messages of one batch due in the same second to the
    same endpoint as one broker message, an envelope, which the cascade times and the delivery loop
    unpacks; v1 and v2 never; off: one broker message per message
    ([Envelopes](../concepts/envelopes.md))"""
    publish_window: int
    """unconfirmed publishes in flight per publishing connection"""
    publish_batch: int
    """rows locked and published per transaction (after a commit, and by the sweeper)"""
    relay_gather_ms: int
    """under load, how long rows committed by concurrent requests of one process may wait for those of
    others still committing, so that they are published together, in fuller envelopes (an idle process
    publishes at once); `0`: only what came during the last publish
    ([Envelopes](../concepts/envelopes.md#across-requests))"""
    sweep_seconds: float
    """how often beat runs the sweeper (it publishes rows a commit left unpublished)"""
    sweep_grace_seconds: float
    """how old a pending row must be before the sweeper takes it"""
    timeouts_lookahead_ms: int
    """the timeout manager (every second) publishes rows due within this window"""
    celery_threshold_seconds: float
    """`DelayedTask` delays up to this keep Celery's own path"""
    claim_margin_ms: int
    """a Celery task's claim (`POST /api/messages/<id>/claim/`) more than this before the message is due is
    refused (409): the cascade hands a task over at its due time, the timeout manager up to
    DELAY_TIMEOUTS_LOOKAHEAD_MS early; keep it above that"""
    task_max_reruns: int
    """reruns of a delivered Celery task redelivered after its worker died (acks_late) or claimed again as
    redelivered; past them the task fails instead of running"""
    ordering_keys: bool
    """accept a message's `ordering_key` and a schedule's overlap `skip` or `buffer_one`; off: they are
    refused (400 naming the field and this setting), for the time of a rolling upgrade from a release
    whose workers ignore them (they would hand keyed messages over out of order): off while it rolls
    out, on once every worker runs this release ([Ordering](../guides/scheduling.md#ordering))"""
    schedules_every_seconds: float
    """how often beat creates the coming runs of recurring schedules ([Recurring
    schedules](../guides/schedules.md))"""
    schedules_ahead_seconds: float
    """how far ahead a schedule's runs are created (and always its next run); above the beat's period, so
    that no run waits for its creation"""
    delivery_loop: bool
    """run the delivery loop in this worker (off for workers of ordinary tasks only)"""
    delivery_processes: int
    """delivery loops per worker: its own thread and this many less one processes beside it (one process's
    loop is bound by one interpreter lock; give it the cores the worker may use)
    ([Scaling](../operations/scaling.md))"""
    delivery_batch: int
    """due messages the delivery loop records per transaction"""
    delivery_prefetch: int
    """unacked messages the delivery loop may hold"""
    rescue_after_ms: int
    """a message this overdue whose copy the broker still holds, or lost, is published again to its
    version's delivery exchange by the delivery loop (the copy that comes second is a suppressed
    duplicate; a Celery-queue task's, a second later, is skipped by its workers' claim); `0`: never
    ([Reliability](../operations/reliability.md))"""
    consumer_sync_seconds: float
    """how often workers re-read which endpoint queues to consume"""
    handler_max_retries: int
    """retries of a failed handler before the message fails"""
    handler_backoff_seconds: float
    """the first retry's backoff (it grows with each retry)"""
    webhook_timeout_seconds: float
    """one deadline over a whole webhook call (resolve, connect, send, read the answer); an endpoint may
    set its own ([Webhooks](../guides/webhooks.md#deadlines-and-caps))"""
    webhook_timeout_max_seconds: float
    """the longest deadline an endpoint may set"""
    webhook_concurrency: int
    """webhook calls in flight at once per delivery loop (one event loop each; endpoints share them
    fairly): a worker runs DELAY_DELIVERY_PROCESSES loops, so 1,024 a worker by default"""
    webhook_endpoint_concurrency: int
    """webhook calls in flight per endpoint and delivery loop (a bulkhead: one slow receiver cannot take
    every call; 128 a worker by default; `max_concurrent` lowers it across workers)"""
    webhook_response_max_bytes: int
    """how much of a webhook's answer is read; a longer answer fails the attempt as `too_large`"""
    webhook_excerpt_bytes: int
    """the start of each answer (or error) kept with its attempt"""
    webhook_retry_after_max_seconds: float
    """the longest `Retry-After` (of a 429 or 503) honoured: the endpoint's calls pause that long"""
    webhook_circuit_failures: int
    """consecutive failed calls that open an endpoint's circuit (calls paused, then one probe); `0`: never"""
    webhook_circuit_seconds: float
    """how long an open circuit pauses calls the first time (doubled at each reopening, up to 10 minutes)"""
    webhook_disable_after: timedelta | None
    """an endpoint whose calls fail for this long with no success is disabled (its messages kept); `off`:
    never"""
    api_rate: str | None
    """API requests per user (a bulk request counts its messages), `<n>/second`, `minute`, `hour` or `day`,
    or `off`; the default is below what one 2-core machine schedules
    ([Security](../security.md#rate-limits))"""
    api_rate_groups: dict[str, str | None]
    """rates for the members of Django groups, instead of `DELAY_API_RATE` (a user in several gets the
    lowest)"""
    max_json_depth: int
    """how deep a JSON request body may nest (arrays and objects)"""
    max_body_bytes: int
    """largest request body (API and admin): one over it answers 413 before it is read, by its
    Content-Length, or once a chunked body passes it; Django's DATA_UPLOAD_MAX_MEMORY_SIZE is this value
    (the default fits a bulk request of 1,000 messages with modest payloads)"""
    api_key_expires: timedelta
    """how long a new API key lasts when its maker names no expiry ([Teams](../guides/teams.md#api-keys))"""
    api_key_max_expires: timedelta
    """the longest expiry a key may be given"""
    invitation_expires: timedelta
    """how long a team's invitation may be accepted ([Teams](../guides/teams.md#invitations))"""
    team_max_pending_invitations: int
    """invitations a team may have waiting for an answer at once (answered and expired ones are pruned with
    the finished messages: [Teams](../guides/teams.md#invitations))"""
    team_max_in_flight: int
    """messages a team may have pending or published at once (a team's own quota in the admin wins;
    [quotas](../guides/teams.md#quotas))"""
    team_max_in_flight_bytes: int
    """bytes of payload (JSON) a team may have in flight at once, its copies still in the cascade included
    (256 MiB; a team's own quota in the admin wins; [quotas](../guides/teams.md#quotas))"""
    team_max_schedules: int
    """recurring schedules a team may keep"""
    team_max_endpoints: int
    """endpoints a team may have"""
    team_max_subscriptions: int
    """topic subscriptions a team may have ([Events](../guides/events.md#quotas))"""
    team_min_schedule_interval_seconds: int
    """the shortest time between two runs of a team's recurring schedule"""
    team_api_rate: str | None
    """API requests of a whole team (its keys and members together; a bulk request counts its messages), or
    `off`"""
    key_api_rate: str | None
    """API requests of each API key, or `off`"""
    audit_retention: timedelta
    """how long the audit log keeps a change in PostgreSQL before the prune archives it
    ([Teams](../guides/teams.md#the-audit-log); its archive:
    [History](../operations/retention.md#the-audit-log))"""
    metrics_allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    """CIDRs whose clients may read `/metrics` and the workers' metrics ports; others get 403
    ([Metrics](../observability/metrics.md))"""
    metrics_token: str
    """when set, `/metrics` and the workers' metrics ports ask for `Authorization: Bearer <token>`; without
    it a forwarded request (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, ...) is refused; required with
    `DELAY_PRODUCTION=1`"""
    metrics_cache_seconds: float
    """how often `/metrics` reads its database and management API figures (in the background: a scrape
    never waits)"""
    worker_metrics_port: int
    """the port each Celery worker serves its metrics on (`0`: none)"""
    worker_metrics_addr: str
    """the address each Celery worker serves its metrics on"""
    readyz_timeout_seconds: float
    """`/readyz`: bound of each probe of the database and broker ([Health
    checks](../observability/health.md))"""
    readyz_cache_seconds: float
    """`/readyz`: how long an answer is reused"""
    accuracy_report_dir: Path
    """facts (Parquet per due date), the Spark job's scratch output and logs; shared storage on a cluster"""
    spark_master: str
    """where the report's Spark job runs (`spark://…`, `yarn`, `k8s://…`)"""
    accuracy_spark_submit: str
    """launch the job with this command instead of this Python"""
    accuracy_lost_after_seconds: float
    """how long after due an undelivered message counts as lost"""
    retention: timedelta
    """how long a delivered or cancelled message stays in PostgreSQL after it finished (`90s`, `15m`,
    `12h`, `7d`); an idempotency key is unique within it ([History](../operations/retention.md))"""
    failed_retention: timedelta
    """the same for failed messages, which people may still republish"""
    archive_dir: Path | None
    """where finished messages go before they leave the table (Parquet, a `due_date=YYYY-MM-DD` directory
    per day), and the audit log's changes (in `_audit/`); one per database"""
    archive_payloads: bool
    """keep each message's payload in the archive (`off`: the column is empty)"""
    archive_retention: timedelta | None
    """days of the archive older than this are deleted by the prune (the audit log's: this long after they
    left the table), or `off` to keep them for ever"""
    prune_batch: int
    """messages (or audit log rows) archived and deleted in one transaction"""
    orphan_copy_retention: timedelta
    """how long an orphan copy (a copy naming no row, set aside for the operator) stays after it was last
    seen; then the prune deletes it, unarchived ([Backup and
    restore](../operations/backup-and-restore.md#what-is-set-aside-and-how-to-read-it))"""
    orphan_copies_max_per_queue: int
    """orphan copies kept per queue: a new one beyond it is acked without a row, counted in
    `delay_orphan_copies_dropped_total` and logged, so forged ids cost bounded rows"""


# --- end of DelaySettings ---


def setting_name(field: str) -> str:
    """The variable (and Django setting) behind a field of conf(), for messages that name it."""
    return specs.variable(field)


def _read() -> DelaySettings:
    values = {}
    for spec in _SPECS:
        try:
            value = getattr(settings, spec.env)
        except AttributeError:
            raise ImproperlyConfigured(f"the setting {spec.env} is missing") from None
        values[spec.key] = spec.coerce(value)
    if values["archive_dir"] is None:  # unset: beside the report's files, wherever those are
        values["archive_dir"] = values["accuracy_report_dir"] / "archive"
    return DelaySettings(**values)


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
def _platform_broker(url: str, management_url: str, connect_timeout_ms: int) -> rabbit.Broker:
    return rabbit.Broker(url, management_url, connect_timeout=connect_timeout_ms / 1000)


def broker(url: str | None = None) -> rabbit.Broker:
    """The platform's broker (one instance per process, so the relay keeps its connections), or
    another one by URL (transfer_delays' target, provision_delays --broker)."""
    c = conf()
    if url is None or url == c.broker_url:
        return _platform_broker(c.broker_url, c.management_url, c.broker_connect_timeout_ms)
    return rabbit.Broker(url, connect_timeout=c.broker_connect_timeout_ms / 1000)


def _reset(**kwargs: object) -> None:
    conf.cache_clear()


setting_changed.connect(_reset, dispatch_uid="scheduling.config.conf")
