"""Every environment variable the platform reads, declared once: its name, how its text is read
and checked (a parser), its default as one would write it in ``.env``, an example, one line of
doc, and where it goes.

- ``delayplatform/settings.py`` reads them all with :func:`read` at start-up: a value that cannot
  work stops start-up with one line naming the variable (manage.py prints it as
  ``configuration error: ...``). Each one marked ``setting`` becomes the Django setting of its own
  name, parsed (a CIDR list is a tuple of networks, DELAY_SHARDS a dict); settings.py derives the
  rest (DATABASES, LOGGING, AXES_*, SECURE_*, the beat schedule) from the values.
- ``scheduling/config/conf.py``'s ``conf()`` is a frozen dataclass (``DelaySettings``, written out there
  from the specs marked ``conf`` by ``manage.py settings_reference``), read back from Django settings: a typed value (settings.py's, or one a test sets with
  ``override_settings``) is only checked, text is parsed as from the environment.
- the tables under "Every setting" on ``docs/reference/configuration.md`` are written from them
  (``manage.py settings_reference``; tests/scheduling/config/test_conf.py fails while the page differs).

Nothing else in ``delayplatform/``, ``scheduling/``, ``rabbit/`` or ``topology/`` spells a
``DELAY_*`` name: code reads values through ``conf()``, and a message that names a variable asks
:func:`variable` for it (tests/test_layout.py checks both). Importing this needs no Django
settings (settings.py imports it): the standard library, Django's exceptions, dj-database-url,
python-dotenv and pure modules of ``scheduling/`` and ``topology/``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dotenv import load_dotenv

from scheduling.config.parsers import (
    ROOT,
    ApiRate,
    ApiRateGroups,
    Boolean,
    Choice,
    DatabaseUrl,
    Directory,
    Duration,
    FernetKeys,
    Header,
    Integer,
    Items,
    LogLevel,
    Networks,
    Number,
    Parser,
    Shards,
    Text,
    TimeOfDay,
    Version,
)

# Loopback and the private ranges, where a Prometheus server usually scrapes from.
METRICS_NETWORKS = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"

# --- the specs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One environment variable: ``env`` its name; ``parse`` reads its text; ``default`` the text
    that applies when it is unset or empty; ``doc`` one line (Markdown, for the reference page);
    ``example`` a value one might set (it must parse). ``conf``: a field of conf() named ``key``
    (``env`` without DELAY_, in lower case, unless given); ``setting``: a Django setting named
    ``env`` (off where settings.py turns the value into Django's own settings, or for plumbing);
    ``shown_default``: the default in words, where its text alone says too little."""

    env: str
    parse: Parser
    default: str
    doc: str
    example: str
    conf: bool = False
    setting: bool = True
    key: str = ""
    shown_default: str | None = None
    group: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.env.removeprefix("DELAY_").lower())

    def read(self, environ: Mapping[str, str]) -> Any:
        """The value the environment gives (unset or empty: the default)."""
        text = environ.get(self.env) or ""
        return self.parse.parse(text if text.strip() else self.default, self.env)

    def coerce(self, value: Any) -> Any:
        """A value from Django's settings: checked when typed already, parsed when text."""
        return self.parse.coerce(value, self.env)


def _group(title: str, *specs: Spec) -> tuple[Spec, ...]:
    return tuple(replace(spec, group=title) for spec in specs)


SPECS: tuple[Spec, ...] = (
    *_group(
        "Start-up and the web",
        Spec("ENV_FILE", Text(), "", "a file of `NAME=value` lines read at start-up (the real environment wins)",
             "/etc/delayplatform.env", setting=False, shown_default="`.env` beside `manage.py`"),
        Spec("SECRET_KEY", Text(strip=False), "", "Django's signing key; start-up fails without it "
             "(`scripts/make-env.sh`, run by `make run`, writes a strong one)", "…",
             shown_default="— (required unless `DEBUG=1`)"),
        Spec("DEBUG", Boolean(), "off", "Django debug mode; only for development", "on"),
        Spec("ALLOWED_HOSTS", Items(list), "127.0.0.1,localhost", "host names this server answers to, "
             "comma-separated", "delay.example.com"),
        Spec("CSRF_TRUSTED_ORIGINS", Items(list), "", "comma-separated origins allowed to post forms to the admin",
             "https://delay.example.com"),
        Spec("DELAY_WEB_NICE", Integer(min=0, max=19), "5", "how much lower the web processes' CPU priority is "
             "than the workers' (`nice`, set by gunicorn.conf.py): when intake and delivery compete for the same "
             "cores, delivery comes first and the API answers slower ([Scaling](../operations/scaling.md))", "10",
             setting=False),
    ),
    *_group(
        "Production and security",
        Spec("DELAY_PRODUCTION", Boolean(), "off", "HTTPS only: SSL redirect (not for `/healthz`, `/readyz`, "
             "`/metrics`), HSTS, secure session and CSRF cookies; needs a strong `SECRET_KEY`, "
             "`DELAY_SECRETS_KEYS`, `DELAY_METRICS_TOKEN` and `DEBUG` off ([Security](../security.md#production-settings-delay_production))",
             "on"),
        Spec("DELAY_TLS_PROXY_HEADER", Header(), "", "behind a TLS-terminating proxy: the header it sets to "
             "`https` (on every request; stripped from clients'); failed logins then count against the address "
             "the proxy adds to `X-Forwarded-For`", "X-Forwarded-Proto", conf=True),
        Spec("DELAY_HSTS_SECONDS", Integer(min=0), "31536000", "HSTS max-age under `DELAY_PRODUCTION`", "86400"),
        Spec("DELAY_HSTS_INCLUDE_SUBDOMAINS", Boolean(), "on", "HSTS covers subdomains too", "off"),
        Spec("DELAY_HSTS_PRELOAD", Boolean(), "off", "ask browsers to preload HSTS (it cannot be undone "
             "quickly)", "on"),
        Spec("DELAY_LOGIN_FAILURE_LIMIT", Integer(min=1), "5", "failed logins (admin, API basic auth) of one "
             "username from one address before that pair is locked out", "10", setting=False),
        Spec("DELAY_LOGIN_COOLOFF_MINUTES", Number(above=0), "15", "how long such a lockout lasts, in minutes",
             "60", setting=False),
        Spec("DELAY_WEBHOOK_ALLOWED_NETWORKS", Networks(), "", "CIDRs webhooks may reach although the SSRF "
             "guard refuses them, e.g. `127.0.0.1/32` for local development "
             "([Security](../security.md#webhook-targets-ssrf-guard))", "127.0.0.1/32,10.1.0.0/16", conf=True,
             shown_default="— (none)"),
        Spec("DELAY_CELERY_TASK_ALLOWLIST", Items(), "", "fnmatch patterns of the tasks `celery_task` endpoints "
             "may run ([Security](../security.md#celery-task-allowlist))", "billing.tasks.*", conf=True,
             shown_default="— (none allowed)"),
        Spec("DELAY_SECRETS_KEYS", FernetKeys(), "", "Fernet keys that encrypt webhook signing secrets at rest, "
             "comma-separated: the first encrypts, all decrypt (rotation: the new key first, `manage.py "
             "rotate_secrets_key`, then drop the old; [Security](../security.md#webhook-secrets-at-rest))",
             "ZXhhbXBsZS1vbmx5Om5ldmVyLXVzZS10aGlzLWtleTE=,ZXhhbXBsZS1vbmx5Om5ldmVyLXVzZS10aGlzLWtleTA=", conf=True,
             shown_default="— (a key derived from `SECRET_KEY`; required with `DELAY_PRODUCTION`)"),
    ),
    *_group(
        "Logs",
        Spec("LOG_LEVEL", LogLevel(), "INFO", "level of the root logger (web, worker, commands); `DEBUG` also "
             "shows Celery's lines about idle periodic runs", "WARNING", setting=False),
        Spec("LOG_FORMAT", Choice("plain", "json"), "plain", "`plain` or `json` (one JSON object per line, web "
             "and worker; [Logs](../observability/logs.md))", "json"),
        Spec("LOG_DELIVERIES_LEVEL", LogLevel(), "INFO", "level of the logger `scheduling.deliveries` (a line per "
             "delivery batch; `DEBUG`: also a line per delivery); `WARNING` silences it", "WARNING", setting=False),
    ),
    *_group(
        "Tracing",
        Spec("OTEL_EXPORTER_OTLP_ENDPOINT", Text(), "", "OpenTelemetry's standard variable: the OTLP/HTTP "
             "collector's base URL (spans go to `<url>/v1/traces`); setting it turns tracing on "
             "([Tracing](../observability/tracing.md))", "http://127.0.0.1:4318", conf=True,
             shown_default="— (tracing off)"),
        Spec("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Text(), "", "the full URL spans are posted to, instead of "
             "the base URL's `/v1/traces`; setting it turns tracing on too", "http://127.0.0.1:4318/v1/traces",
             conf=True, shown_default="—"),
        Spec("OTEL_TRACES_EXPORTER", Choice("", "otlp", "none"), "", "`otlp` turns tracing on (to "
             "`http://localhost:4318` when no endpoint is set); `none` keeps it off whatever else is set", "none",
             conf=True, shown_default="— (on when an endpoint is set)"),
        Spec("OTEL_SERVICE_NAME", Text(), "", "the `service.name` of the platform's spans (the other `OTEL_*` "
             "variables, such as `OTEL_TRACES_SAMPLER`, are read by the OpenTelemetry SDK itself)", "delay-eu",
             conf=True, shown_default="`delay-platform`"),
    ),
    *_group(
        "The database",
        Spec("DATABASE_URL", DatabaseUrl(), "postgres://postgres:postgres@127.0.0.1:5432/delayplatform",
             "the PostgreSQL database, as a dj-database-url URL", "postgres://user:pw@db.example:5432/delayplatform",
             setting=False),
        Spec("DB_CONN_MAX_AGE", Integer(min=0), "60", "seconds a database connection is reused (with health "
             "checks)", "300", setting=False),
        Spec("CELERY_DB_REUSE_MAX", Integer(min=0), "1000", "tasks a worker process runs on one database "
             "connection (reconnecting costs milliseconds of each delivery)", "100"),
        Spec("DELAY_MIGRATION_LOCK_TIMEOUT_MS", Integer(min=0, max=600000), "3000",
             "`manage.py migrate` waits at most this long for each lock (PostgreSQL's `lock_timeout`, for migrate "
             "only; `0`: no limit): a migration that needs a table a long transaction holds fails with one line "
             "instead of queueing every request behind it ([Upgrades](../operations/upgrades.md#the-lock-timeout))",
             "10000", conf=True),
    ),
    *_group(
        "The broker and the cascades",
        Spec("BROKER_URL", Text(), "amqp://guest:guest@127.0.0.1:5672//", "RabbitMQ (cascade and Celery); a "
             "cluster as `amqp://a:5672/v;amqp://b:5672/v;amqp://c:5672/v` ([Cluster](../operations/cluster.md))",
             "amqp://user:pw@rabbit1:5672/", conf=True),
        Spec("RABBITMQ_MANAGEMENT_URL", Text(), "", "management API, for verify and queue depths; several nodes "
             "separated by `;`", "http://user:pw@rabbit1:15672", conf=True, key="management_url",
             shown_default="each broker node's host, port 15672"),
        Spec("DELAY_BROKER_CONNECT_TIMEOUT_MS", Integer(min=100, max=120000, why="a request may wait for it"), "5000",
             "how long opening a connection to RabbitMQ may take before that node counts as down (the next node "
             "of a cluster URL is tried; a request that schedules answers 503 once none answered)", "10000",
             conf=True),
        Spec("DELAY_QUEUE_TYPE", Choice("classic", "quorum"), "classic", "type of the endpoint queues and "
             "Celery's task queues: `quorum` on a cluster (replicated), `classic` what existing brokers have",
             "quorum", conf=True),
        Spec("DELAY_DEFAULT_VERSION", Version(), "v3", "cascade of new endpoints that name none (once it is "
             "provisioned; until then the newest provisioned version), and of commands run without `--version`",
             "v2", conf=True),
        Spec("DELAY_SHARDS", Shards(), "", "shards per version: k parallel cascades of a version, 1 to 64, when one "
             "quorum queue per level is the ceiling ([Shards](../operations/shards.md))", "v3=4,v2=2", conf=True,
             shown_default="— (1 shard each)"),
        Spec("DELAY_ARRIVAL_MARGIN_MS", Integer(min=0), "250", "how early a message leaves the cascade for the "
             "worker's timer (absorbs hop latency: never early)", "300", conf=True),
        Spec("DELAY_RELAY_QUEUE", Text(), "dp.relay", "the Celery queue of the sweeper, timeout manager and "
             "unroutable drain", "dp.relay.blue", conf=True),
    ),
    *_group(
        "Scheduling",
        Spec("DELAY_MAX_PAYLOAD_BYTES", Integer(min=1), "262144", "largest payload (its JSON) a message may carry",
             "65536", conf=True),
        Spec("DELAY_BULK_MAX", Integer(min=1), "1000", "messages one bulk request may schedule", "500", conf=True),
        Spec("DELAY_ENVELOPES", Boolean(), "on", "v3 (and later versions): the relay sends the messages of one "
             "batch due in the same second to the same endpoint as one broker message, an envelope, which the "
             "cascade times and the delivery loop unpacks; v1 and v2 never; off: one broker message per message "
             "([Envelopes](../concepts/envelopes.md))",
             "off", conf=True),
        Spec("DELAY_PUBLISH_WINDOW", Integer(min=1), "128", "unconfirmed publishes in flight per publishing "
             "connection", "256", conf=True),
        Spec("DELAY_PUBLISH_BATCH", Integer(min=1), "500", "rows locked and published per transaction (after a "
             "commit, and by the sweeper)", "1000", conf=True),
        Spec("DELAY_RELAY_GATHER_MS", Integer(min=0, max=1000, why="a request waits for it"), "5",
             "under load, how long rows committed by concurrent requests of one process may wait for those "
             "of others still committing, so that they are published together, in fuller envelopes (an idle "
             "process publishes at once); `0`: only what came during the last publish "
             "([Envelopes](../concepts/envelopes.md#across-requests))", "20", conf=True),
        Spec("DELAY_SWEEP_SECONDS", Number(above=0), "2", "how often beat runs the sweeper (it publishes rows a "
             "commit left unpublished)", "5", conf=True),
        Spec("DELAY_SWEEP_GRACE_SECONDS", Number(min=0), "1", "how old a pending row must be before the sweeper "
             "takes it", "2", conf=True),
        Spec("DELAY_TIMEOUTS_LOOKAHEAD_MS", Integer(min=0), "1500", "the timeout manager (every second) publishes "
             "rows due within this window", "2000", conf=True),
        Spec("DELAY_CELERY_THRESHOLD_SECONDS", Number(min=0), "0", "`DelayedTask` delays up to this keep Celery's "
             "own path", "60", conf=True),
        Spec("DELAY_CLAIM_MARGIN_MS", Integer(min=0, max=60000, why="a wider one lets a claim skip more of a wait"),
             "3000",
             "a Celery task's claim (`POST /api/messages/<id>/claim/`) more than this before the message is due is "
             "refused (409): the cascade hands a task over at its due time, the timeout manager up to "
             "DELAY_TIMEOUTS_LOOKAHEAD_MS early; keep it above that", "5000", conf=True),
        Spec("DELAY_TASK_MAX_RERUNS", Integer(min=0), "3", "reruns of a delivered Celery task redelivered after its "
             "worker died (acks_late) or claimed again as redelivered; past them the task fails instead of running",
             "5", conf=True),
        Spec("DELAY_ORDERING_KEYS", Boolean(), "on", "accept a message's `ordering_key` and a schedule's overlap "
             "`skip` or `buffer_one`; off: they are refused (400 naming the field and this setting), for the time "
             "of a rolling upgrade from a release whose workers ignore them (they would hand keyed messages over "
             "out of order): off while it rolls out, on once every worker runs this release "
             "([Ordering](../guides/scheduling.md#ordering))", "off", conf=True),
        Spec("DELAY_SCHEDULES_EVERY_SECONDS", Number(above=0), "5", "how often beat creates the coming runs of "
             "recurring schedules ([Recurring schedules](../guides/schedules.md))", "10", conf=True),
        Spec("DELAY_SCHEDULES_AHEAD_SECONDS", Number(min=0), "60", "how far ahead a schedule's runs are created "
             "(and always its next run); above the beat's period, so that no run waits for its creation", "300",
             conf=True),
    ),
    *_group(
        "Delivery",
        Spec("DELAY_DELIVERY_LOOP", Boolean(), "on", "run the delivery loop in this worker (off for workers of "
             "ordinary tasks only)", "off", conf=True),
        Spec("DELAY_DELIVERY_PROCESSES", Integer(min=1, max=64), "2", "delivery loops per worker: its own thread "
             "and this many less one processes beside it (one process's loop is bound by one interpreter lock; "
             "give it the cores the worker may use) ([Scaling](../operations/scaling.md))", "4", conf=True),
        Spec("DELAY_DELIVERY_BATCH", Integer(min=1), "500", "due messages the delivery loop records per "
             "transaction", "200", conf=True),
        Spec("DELAY_DELIVERY_PREFETCH", Integer(min=1), "20000", "unacked messages the delivery loop may hold",
             "5000", conf=True),
        Spec("DELAY_RESCUE_AFTER_MS", Integer(min=0), "1000", "a message this overdue whose copy the broker still "
             "holds, or lost, is published again to its version's delivery exchange by the delivery loop (the copy that "
             "comes second is a suppressed duplicate; a Celery-queue task's, a second later, is skipped by its workers' "
             "claim); `0`: never ([Reliability](../operations/reliability.md))", "2000", conf=True),
        Spec("DELAY_CONSUMER_SYNC_SECONDS", Number(above=0), "5", "how often workers re-read which endpoint "
             "queues to consume", "10", conf=True),
        Spec("DELAY_HANDLER_MAX_RETRIES", Integer(min=0), "5", "retries of a failed handler before the message "
             "fails", "3", conf=True),
        Spec("DELAY_HANDLER_BACKOFF_SECONDS", Number(min=0), "2", "the first retry's backoff (it grows with each "
             "retry)", "5", conf=True),
        Spec("DELAY_WEBHOOK_TIMEOUT_SECONDS", Number(above=0), "5", "one deadline over a whole webhook call "
             "(resolve, connect, send, read the answer); an endpoint may set its own "
             "([Webhooks](../guides/webhooks.md#deadlines-and-caps))", "10", conf=True),
        Spec("DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS", Number(above=0), "60", "the longest deadline an endpoint may set",
             "300", conf=True),
        Spec("DELAY_WEBHOOK_CONCURRENCY", Integer(min=1), "512", "webhook calls in flight at once per delivery "
             "loop (one event loop each; endpoints share them fairly): a worker runs DELAY_DELIVERY_PROCESSES loops, "
             "so 1,024 a worker by default", "1024", conf=True),
        Spec("DELAY_WEBHOOK_ENDPOINT_CONCURRENCY", Integer(min=1), "64", "webhook calls in flight per endpoint and "
             "delivery loop (a bulkhead: one slow receiver cannot take every call; 128 a worker by default; "
             "`max_concurrent` lowers it across workers)", "16", conf=True),
        Spec("DELAY_WEBHOOK_RESPONSE_MAX_BYTES", Integer(min=0), "131072", "how much of a webhook's answer is read; "
             "a longer answer fails the attempt as `too_large`", "65536", conf=True),
        Spec("DELAY_WEBHOOK_EXCERPT_BYTES", Integer(min=0, max=20480, why="kept with every attempt"), "2048",
             "the start of each answer (or error) kept with its attempt", "20480", conf=True),
        Spec("DELAY_WEBHOOK_RETRY_AFTER_MAX_SECONDS", Number(min=0), "3600", "the longest `Retry-After` (of a 429 "
             "or 503) honoured: the endpoint's calls pause that long", "600", conf=True),
        Spec("DELAY_WEBHOOK_CIRCUIT_FAILURES", Integer(min=0), "10", "consecutive failed calls that open an "
             "endpoint's circuit (calls paused, then one probe); `0`: never", "20", conf=True),
        Spec("DELAY_WEBHOOK_CIRCUIT_SECONDS", Number(above=0), "30", "how long an open circuit pauses calls the "
             "first time (doubled at each reopening, up to 10 minutes)", "60", conf=True),
        Spec("DELAY_WEBHOOK_DISABLE_AFTER", Duration(off=True), "5d", "an endpoint whose calls fail for this long "
             "with no success is disabled (its messages kept); `off`: never", "2d", conf=True),
    ),
    *_group(
        "The API",
        Spec("DELAY_API_RATE", ApiRate(), "5000/second", "API requests per user (a bulk request counts its "
             "messages), `<n>/second`, `minute`, `hour` or `day`, or `off`; the default is below what one "
             "2-core machine schedules ([Security](../security.md#rate-limits))", "100/second", conf=True),
        Spec("DELAY_API_RATE_GROUPS", ApiRateGroups(), "", "rates for the members of Django groups, instead of "
             "`DELAY_API_RATE` (a user in several gets the lowest)", "partners=100/second,batch=off", conf=True,
             shown_default="—"),
        Spec("DELAY_MAX_JSON_DEPTH", Integer(min=4, why="a bulk request's payloads are at level 4"), "64",
             "how deep a JSON request body may nest (arrays and objects)", "16", conf=True),
        Spec("DELAY_MAX_BODY_BYTES", Integer(min=65536, why="a bulk request of small messages must fit"),
             "16777216", "largest request body (API and admin): one over it answers 413 before it is read, by its "
             "Content-Length, or once a chunked body passes it; Django's DATA_UPLOAD_MAX_MEMORY_SIZE is this "
             "value (the default fits a bulk request of 1,000 messages with modest payloads)", "4194304",
             conf=True),
    ),
    *_group(
        "Teams, keys and the audit log",
        Spec("DELAY_API_KEY_EXPIRES", Duration(), "90d", "how long a new API key lasts when its maker names no "
             "expiry ([Teams](../guides/teams.md#api-keys))", "30d", conf=True),
        Spec("DELAY_API_KEY_MAX_EXPIRES", Duration(), "365d", "the longest expiry a key may be given", "90d",
             conf=True),
        Spec("DELAY_INVITATION_EXPIRES", Duration(), "7d", "how long a team's invitation may be accepted "
             "([Teams](../guides/teams.md#invitations))", "2d", conf=True),
        Spec("DELAY_TEAM_MAX_PENDING_INVITATIONS", Integer(min=1), "100", "invitations a team may have waiting "
             "for an answer at once (answered and expired ones are pruned with the finished messages: "
             "[Teams](../guides/teams.md#invitations))", "20", conf=True),
        Spec("DELAY_TEAM_MAX_IN_FLIGHT", Integer(min=1), "1000000", "messages a team may have pending or published "
             "at once (a team's own quota in the admin wins; [quotas](../guides/teams.md#quotas))", "100000",
             conf=True),
        Spec("DELAY_TEAM_MAX_IN_FLIGHT_BYTES", Integer(min=1), "268435456", "bytes of payload (JSON) a team may "
             "have in flight at once, its copies still in the cascade included (256 MiB; a team's own quota in "
             "the admin wins; [quotas](../guides/teams.md#quotas))", "67108864", conf=True),
        Spec("DELAY_TEAM_MAX_SCHEDULES", Integer(min=0), "1000", "recurring schedules a team may keep", "200",
             conf=True),
        Spec("DELAY_TEAM_MAX_ENDPOINTS", Integer(min=0), "100", "endpoints a team may have", "20", conf=True),
        Spec("DELAY_TEAM_MAX_SUBSCRIPTIONS", Integer(min=0), "1000", "topic subscriptions a team may have "
             "([Events](../guides/events.md#quotas))", "200", conf=True),
        Spec("DELAY_TEAM_MIN_SCHEDULE_INTERVAL_SECONDS", Integer(min=1), "10", "the shortest time between two "
             "runs of a team's recurring schedule", "60", conf=True),
        Spec("DELAY_TEAM_API_RATE", ApiRate(), "5000/second", "API requests of a whole team (its keys and members "
             "together; a bulk request counts its messages), or `off`", "1000/second", conf=True),
        Spec("DELAY_KEY_API_RATE", ApiRate(), "5000/second", "API requests of each API key, or `off`",
             "100/second", conf=True),
        Spec("DELAY_AUDIT_RETENTION", Duration(), "400d", "how long the audit log keeps a change in PostgreSQL "
             "before the prune archives it ([Teams](../guides/teams.md#the-audit-log); its archive: "
             "[History](../operations/retention.md#the-audit-log))", "730d", conf=True),
    ),
    *_group(
        "Metrics and health",
        Spec("DELAY_METRICS_ALLOWED_NETWORKS", Networks(), METRICS_NETWORKS, "CIDRs whose clients "
             "may read `/metrics` and the workers' metrics ports; others get 403 ([Metrics](../observability/metrics.md))",
             "10.0.0.0/8", conf=True, shown_default="loopback and private ranges "
             f"(`{METRICS_NETWORKS.replace(',', ', ')}`)"),
        Spec("DELAY_METRICS_TOKEN", Text(), "", "when set, `/metrics` and the workers' metrics ports ask for "
             "`Authorization: Bearer <token>`; without it a forwarded request (`Forwarded`, `X-Forwarded-For`, "
             "`X-Real-IP`, ...) is refused; required with `DELAY_PRODUCTION=1`", "…", conf=True, shown_default="— (none)"),
        Spec("DELAY_METRICS_CACHE_SECONDS", Number(above=0), "15", "how often `/metrics` reads its database and "
             "management API figures (in the background: a scrape never waits)", "30", conf=True),
        Spec("DELAY_WORKER_METRICS_PORT", Integer(min=0, max=65535, off=0), "9808", "the port each Celery worker "
             "serves its metrics on (`0`: none)", "9900", conf=True),
        Spec("DELAY_WORKER_METRICS_ADDR", Text(), "127.0.0.1", "the address each Celery worker serves its "
             "metrics on", "0.0.0.0", conf=True),
        Spec("PROMETHEUS_MULTIPROC_DIR", Text(), "", "where a server's processes keep their metrics (prometheus "
             "client's multiprocess mode; read by `scheduling/observability/metrics_dir.py` before Django starts); one per "
             "instance", "/run/dp-web-metrics", setting=False, shown_default="— (a new directory per server)"),
        Spec("DELAY_READYZ_TIMEOUT_SECONDS", Number(above=0), "2", "`/readyz`: bound of each probe of the database "
             "and broker ([Health checks](../observability/health.md))", "1", conf=True),
        Spec("DELAY_READYZ_CACHE_SECONDS", Number(min=0), "3", "`/readyz`: how long an answer is reused", "0",
             conf=True),
    ),
    *_group(
        "The accuracy report",
        Spec("ACCURACY_REPORT_DIR", Directory(), "var/accuracy", "facts (Parquet per due date), the Spark job's "
             "scratch output and logs; shared storage on a cluster", "/srv/delay/accuracy", conf=True),
        Spec("SPARK_MASTER", Text(), "local[*]", "where the report's Spark job runs (`spark://…`, `yarn`, "
             "`k8s://…`)", "spark://spark.example:7077", conf=True),
        Spec("ACCURACY_SPARK_SUBMIT", Text(), "", "launch the job with this command instead of this Python",
             "spark-submit --master yarn --driver-memory 4g", conf=True),
        Spec("ACCURACY_LOST_AFTER_SECONDS", Number(min=0), "600", "how long after due an undelivered message "
             "counts as lost", "3600", conf=True),
        Spec("ACCURACY_REPORT_AT", TimeOfDay(), "02:30", "when beat runs the nightly report of the day before "
             "(UTC, `HH:MM`, or `off`)", "04:00"),
    ),
    *_group(
        "Retention and the archive",
        Spec("DELAY_RETENTION", Duration(), "7d", "how long a delivered or cancelled message stays in PostgreSQL "
             "after it finished (`90s`, `15m`, `12h`, `7d`); an idempotency key is unique within it "
             "([History](../operations/retention.md))", "30d", conf=True),
        Spec("DELAY_FAILED_RETENTION", Duration(), "30d", "the same for failed messages, which people may still "
             "republish", "90d", conf=True),
        Spec("DELAY_ARCHIVE_DIR", Directory(optional=True), "", "where finished messages go before they leave the "
             "table (Parquet, a `due_date=YYYY-MM-DD` directory per day), and the audit log's changes (in "
             "`_audit/`); one per database", "/srv/delay/archive",
             conf=True, shown_default="`$ACCURACY_REPORT_DIR/archive`"),
        Spec("DELAY_ARCHIVE_PAYLOADS", Boolean(), "on", "keep each message's payload in the archive (`off`: the "
             "column is empty)", "off", conf=True),
        Spec("DELAY_ARCHIVE_RETENTION", Duration(off=True), "400d", "days of the archive older than this are "
             "deleted by the prune (the audit log's: this long after they left the table), or `off` to keep them "
             "for ever", "off", conf=True),
        Spec("DELAY_PRUNE_EVERY", Duration(off=True), "1h", "how often beat runs the prune, or `off` (then only "
             "`manage.py prune_messages`)", "15m"),
        Spec("DELAY_PRUNE_BATCH", Integer(min=1), "100000", "messages (or audit log rows) archived and deleted in "
             "one transaction", "20000", conf=True),
        Spec("DELAY_ORPHAN_COPY_RETENTION", Duration(), "30d", "how long an orphan copy (a copy naming no row, set "
             "aside for the operator) stays after it was last seen; then the prune deletes it, unarchived "
             "([Backup and restore](../operations/backup-and-restore.md#what-is-set-aside-and-how-to-read-it))",
             "90d", conf=True),
        Spec("DELAY_ORPHAN_COPIES_MAX_PER_QUEUE", Integer(min=1), "10000", "orphan copies kept per queue: a new one "
             "beyond it is acked without a row, counted in `delay_orphan_copies_dropped_total` and logged, so "
             "forged ids cost bounded rows", "1000", conf=True),
    ),
)
BY_KEY: dict[str, Spec] = {spec.key: spec for spec in SPECS}
BY_ENV: dict[str, Spec] = {spec.env: spec for spec in SPECS}


def variable(key: str) -> str:
    """The environment variable (and Django setting) of a spec: what messages and help texts name."""
    return BY_KEY[key].env


def load_env_file(environ: Mapping[str, str] = os.environ) -> None:
    """Read ENV_FILE (or ``.env`` beside manage.py) into the environment; what is set wins."""
    load_dotenv(environ.get(variable("env_file")) or ROOT / ".env", override=False)


def read(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every variable, parsed and checked: key -> value. The first that cannot work raises
    ImproperlyConfigured, one line naming it."""
    return {spec.key: spec.read(environ) for spec in SPECS}


def django_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The Django settings of a :func:`read`'s values: the variable's name -> its value."""
    return {spec.env: values[spec.key] for spec in SPECS if spec.setting}
