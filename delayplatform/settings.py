"""Settings, all from the environment (a ``.env`` file beside manage.py, or the file ENV_FILE
names, is read too; real environment variables win). Secure by default: DEBUG is off unless asked for, and without
DEBUG a missing SECRET_KEY stops start-up."""

import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv
from kombu import Exchange, Queue

from delayplatform import logs
from scheduling import durations, guards, metrics_access, task_names

BASE_DIR = Path(__file__).resolve().parent.parent
load_dotenv(os.environ.get("ENV_FILE", BASE_DIR / ".env"), override=False)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_number(name: str, default: str, kind: type = int):
    """An int or float from the environment; a value that is not one stops start-up with one line."""
    value = os.environ.get(name) or default
    try:
        return kind(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a {'whole ' if kind is int else ''}number, not {value!r}") from None


DEBUG = env_bool("DEBUG")
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment or in .env "
            "(make run writes one), or set DEBUG=1 for local development."
        )
    SECRET_KEY = "insecure-development-only-key"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "axes",
    "scheduling",
]

MIDDLEWARE = [
    # first: /healthz and /readyz answer before the Host check and the HTTPS redirect (probes
    # send the pod's IP as Host, over plain HTTP); see scheduling/health_views.py
    "scheduling.health_views.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: answers a locked-out login
]

ROOT_URLCONF = "delayplatform.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "delayplatform.wsgi.application"

# PostgreSQL only: the relay and the timeout manager rely on SELECT ... FOR UPDATE SKIP LOCKED,
# bulk writes on COPY and UPDATE ... FROM (VALUES ...), the dashboard on percentile_disc.
DATABASES = {
    "default": dj_database_url.config(
        env="DATABASE_URL",
        default="postgres://postgres:postgres@127.0.0.1:5432/delayplatform",
        conn_max_age=env_number("DB_CONN_MAX_AGE", "60"),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"DATABASE_URL must name a PostgreSQL database (postgres://...), not {DATABASES['default']['ENGINE']}"
    )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# Production: HTTPS only, so that `manage.py check --deploy` is clean (docs/security.md).
DELAY_PRODUCTION = env_bool("DELAY_PRODUCTION")
# Behind a TLS-terminating proxy: the header it sets to "https" on requests that came in over TLS
# (e.g. X-Forwarded-Proto). The proxy must set it on every request (and strip it from clients).
DELAY_TLS_PROXY_HEADER = os.environ.get("DELAY_TLS_PROXY_HEADER", "").strip()
if DELAY_TLS_PROXY_HEADER:
    if not re.fullmatch(r"[A-Za-z0-9-]+", DELAY_TLS_PROXY_HEADER):
        raise ImproperlyConfigured(f"DELAY_TLS_PROXY_HEADER must be a header name, not {DELAY_TLS_PROXY_HEADER!r}")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + DELAY_TLS_PROXY_HEADER.upper().replace("-", "_"), "https")
    # the proxy's X-Forwarded-For names the client, so a login lockout hits the client, not the proxy
    AXES_CLIENT_IP_CALLABLE = "scheduling.client_ip.client_ip"
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)/?$"]  # probes and scrapers call over plain HTTP inside
# HSTS under DELAY_PRODUCTION: a year; subdomains included; preload only when asked (it cannot be undone quickly)
DELAY_HSTS_SECONDS = env_number("DELAY_HSTS_SECONDS", "31536000")
DELAY_HSTS_INCLUDE_SUBDOMAINS = env_bool("DELAY_HSTS_INCLUDE_SUBDOMAINS", True)
DELAY_HSTS_PRELOAD = env_bool("DELAY_HSTS_PRELOAD")
if DELAY_PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured("DELAY_PRODUCTION=1 and DEBUG=1 cannot go together")
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-"):
        raise ImproperlyConfigured("SECRET_KEY must be at least 50 random characters with DELAY_PRODUCTION=1 "
                                   "(scripts/make-env.sh writes one)")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = DELAY_HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = DELAY_HSTS_INCLUDE_SUBDOMAINS
    SECURE_HSTS_PRELOAD = DELAY_HSTS_PRELOAD
    if not SECURE_HSTS_PRELOAD:  # a decision, not an oversight (docs/security.md)
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# Failed logins (admin, and API basic auth) are limited by django-axes: after this many failures
# for one username from one address, that pair is locked out for the cool-off time.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_number("DELAY_LOGIN_FAILURE_LIMIT", "5")
AXES_COOLOFF_TIME = timedelta(minutes=env_number("DELAY_LOGIN_COOLOFF_MINUTES", "15", float))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # its start-up banner in every process's log
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME <= timedelta(0):
    raise ImproperlyConfigured("DELAY_LOGIN_FAILURE_LIMIT and DELAY_LOGIN_COOLOFF_MINUTES must be above 0")

# Web and worker log through this (delayplatform/logs.py): LOG_FORMAT plain or json; Celery's lines
# about idle runs of the periodic tasks are dropped; one line per delivery (scheduling.deliveries).
LOG_FORMAT = logs.log_format(os.environ.get("LOG_FORMAT"))
LOGGING_CONFIG = "delayplatform.logs.configure"
LOGGING = logs.config(
    log_format=LOG_FORMAT,
    root_level=logs.level("LOG_LEVEL", os.environ.get("LOG_LEVEL"), "INFO"),
    deliveries_level=logs.level("LOG_DELIVERIES_LEVEL", os.environ.get("LOG_DELIVERIES_LEVEL"), "INFO"),
)

# --- the broker -------------------------------------------------------------------------------

BROKER_URL = os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
RABBITMQ_MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "")  # derived when empty

# The type of the queues the platform declares outside the cascades: endpoint queues and
# Celery's task queues. "quorum" on a cluster (replicated to every node, so a node's death
# loses nothing and stops nothing); "classic" (the default) keeps what existing brokers have.
DELAY_QUEUE_TYPE = os.environ.get("DELAY_QUEUE_TYPE") or "classic"
if DELAY_QUEUE_TYPE not in ("classic", "quorum"):
    raise ImproperlyConfigured(f"DELAY_QUEUE_TYPE must be classic or quorum, not {DELAY_QUEUE_TYPE!r}")
_TASK_QUEUE_ARGUMENTS = {"x-queue-type": "quorum"} if DELAY_QUEUE_TYPE == "quorum" else None

# Which cascade new endpoints use unless they say otherwise (and commands without --version).
DELAY_DEFAULT_VERSION = os.environ.get("DELAY_DEFAULT_VERSION") or "v3"
# Shards per version, "v3=4,v2=2": k parallel cascades of a version (a version not named has 1),
# when one quorum queue per level is the ceiling. Checked in scheduling/conf.py.
DELAY_SHARDS = os.environ.get("DELAY_SHARDS", "")

# --- Celery -----------------------------------------------------------------------------------

CELERY_BROKER_URL = BROKER_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Every task that comes out of the cascade goes through the message lifecycle in the worker:
# recorded delivered; skipped if cancelled or a duplicate (scheduling/worker.py).
CELERY_TASK_ANNOTATIONS = ["scheduling.worker.ClaimBeforeStart"]

# --- the delay platform -----------------------------------------------------------------------

# The cascade carries whole seconds minus this margin; the worker's timer holds the rest, so a
# message is never delivered early and hop latency (~1.5 ms per set bit, more under load) is
# absorbed instead of showing up as lateness.
DELAY_ARRIVAL_MARGIN_MS = env_number("DELAY_ARRIVAL_MARGIN_MS", "250")
DELAY_MAX_PAYLOAD_BYTES = env_number("DELAY_MAX_PAYLOAD_BYTES", str(256 * 1024))
DELAY_BULK_MAX = env_number("DELAY_BULK_MAX", "1000")
DELAY_PUBLISH_WINDOW = env_number("DELAY_PUBLISH_WINDOW", "128")
DELAY_PUBLISH_BATCH = env_number("DELAY_PUBLISH_BATCH", "500")
DELAY_SWEEP_SECONDS = env_number("DELAY_SWEEP_SECONDS", "2", float)
DELAY_SWEEP_GRACE_SECONDS = env_number("DELAY_SWEEP_GRACE_SECONDS", "1", float)
DELAY_HANDLER_MAX_RETRIES = env_number("DELAY_HANDLER_MAX_RETRIES", "5")
DELAY_HANDLER_BACKOFF_SECONDS = env_number("DELAY_HANDLER_BACKOFF_SECONDS", "2", float)
DELAY_WEBHOOK_TIMEOUT_SECONDS = env_number("DELAY_WEBHOOK_TIMEOUT_SECONDS", "10", float)
DELAY_CONSUMER_SYNC_SECONDS = env_number("DELAY_CONSUMER_SYNC_SECONDS", "5", float)
# /readyz (scheduling/health.py): each probe of the database and the broker is bounded by this
# timeout, and an answer is reused for this long (a load balancer polling every second then
# opens one broker connection per web process every few seconds).
DELAY_READYZ_TIMEOUT_SECONDS = env_number("DELAY_READYZ_TIMEOUT_SECONDS", "2", float)
if not DELAY_READYZ_TIMEOUT_SECONDS > 0:
    raise ImproperlyConfigured(f"DELAY_READYZ_TIMEOUT_SECONDS must be more than 0, not {DELAY_READYZ_TIMEOUT_SECONDS!r}")
DELAY_READYZ_CACHE_SECONDS = env_number("DELAY_READYZ_CACHE_SECONDS", "3", float)
if DELAY_READYZ_CACHE_SECONDS < 0:
    raise ImproperlyConfigured(f"DELAY_READYZ_CACHE_SECONDS must be 0 or more, not {DELAY_READYZ_CACHE_SECONDS!r}")
# The delivery loop (scheduling/delivery_loop.py): unacked messages it may hold, due messages it
# records per transaction, and webhook calls it runs at once.
DELAY_DELIVERY_LOOP = env_bool("DELAY_DELIVERY_LOOP", True)
DELAY_DELIVERY_PREFETCH = env_number("DELAY_DELIVERY_PREFETCH", "20000")
DELAY_DELIVERY_BATCH = env_number("DELAY_DELIVERY_BATCH", "500")
DELAY_WEBHOOK_CONCURRENCY = env_number("DELAY_WEBHOOK_CONCURRENCY", "8")
DELAY_RELAY_QUEUE = os.environ.get("DELAY_RELAY_QUEUE") or "dp.relay"
# The timeout manager publishes rows due within this window (beat runs it every second).
DELAY_TIMEOUTS_LOOKAHEAD_MS = env_number("DELAY_TIMEOUTS_LOOKAHEAD_MS", "1500")
# What handlers may reach (scheduling/guards.py). Webhooks never go to loopback, private,
# link-local (cloud metadata), multicast or reserved addresses unless a network here allows it
# (CIDRs, e.g. 127.0.0.1/32 for local development); celery_task endpoints run only tasks whose
# names match a pattern here (fnmatch, e.g. billing.tasks.*; empty: none).
DELAY_WEBHOOK_ALLOWED_NETWORKS = env_list("DELAY_WEBHOOK_ALLOWED_NETWORKS", "")
try:
    guards.parse_networks(DELAY_WEBHOOK_ALLOWED_NETWORKS)
except ValueError as exc:
    raise ImproperlyConfigured(f"DELAY_WEBHOOK_ALLOWED_NETWORKS: {exc}") from None
DELAY_CELERY_TASK_ALLOWLIST = env_list("DELAY_CELERY_TASK_ALLOWLIST", "")

# --- metrics (Prometheus, docs/metrics.md) ----------------------------------------------------
# /metrics on the web server and each worker's metrics port answer clients on these networks only
# (CIDRs; default: loopback and private ranges, where Prometheus scrapes from) and, when a token is
# set, only requests with "Authorization: Bearer <DELAY_METRICS_TOKEN>".
DELAY_METRICS_TOKEN = os.environ.get("DELAY_METRICS_TOKEN", "")
DELAY_METRICS_ALLOWED_NETWORKS = env_list("DELAY_METRICS_ALLOWED_NETWORKS", metrics_access.DEFAULT_NETWORKS)
try:
    metrics_access.parse_networks(DELAY_METRICS_ALLOWED_NETWORKS)
except ValueError as exc:
    raise ImproperlyConfigured(f"DELAY_METRICS_ALLOWED_NETWORKS: {exc}") from None
# The figures read from the database and the management API (outbox, in flight, unroutable,
# overdue) are refreshed at most this often, in the background: a scrape never waits for them.
DELAY_METRICS_CACHE_SECONDS = env_number("DELAY_METRICS_CACHE_SECONDS", "15", float)
if not DELAY_METRICS_CACHE_SECONDS > 0:
    raise ImproperlyConfigured(
        f"DELAY_METRICS_CACHE_SECONDS must be more than 0, not {DELAY_METRICS_CACHE_SECONDS}")
# Every Celery worker serves its metrics on this port (0: off) and address.
DELAY_WORKER_METRICS_PORT = env_number("DELAY_WORKER_METRICS_PORT", "9808")
if not 0 <= DELAY_WORKER_METRICS_PORT <= 65535:
    raise ImproperlyConfigured(
        f"DELAY_WORKER_METRICS_PORT must be 0 (off) to 65535, not {DELAY_WORKER_METRICS_PORT}")
DELAY_WORKER_METRICS_ADDR = os.environ.get("DELAY_WORKER_METRICS_ADDR") or "127.0.0.1"

CELERY_TASK_QUEUES = [
    Queue("celery", Exchange("celery", type="direct"), routing_key="celery", queue_arguments=_TASK_QUEUE_ARGUMENTS),
    Queue(DELAY_RELAY_QUEUE, Exchange(DELAY_RELAY_QUEUE, type="direct"), routing_key=DELAY_RELAY_QUEUE,
          queue_arguments=_TASK_QUEUE_ARGUMENTS),
]
CELERY_TASK_ROUTES = {"scheduling.relay.*": {"queue": DELAY_RELAY_QUEUE}}
CELERY_BEAT_SCHEDULE = {
    "sweep-pending-messages": {
        "task": task_names.RELAY_SWEEP,
        "schedule": DELAY_SWEEP_SECONDS,
        "options": {"expires": 10 * DELAY_SWEEP_SECONDS},
    },
    "publish-due-timeouts": {
        "task": task_names.RELAY_TIMEOUTS,
        "schedule": 1.0,
        "options": {"expires": 5},
    },
    "drain-unroutable": {
        "task": task_names.DRAIN_UNROUTABLE,
        "schedule": 5.0,
        "options": {"expires": 30},
    },
}

# --- the accuracy report (export + Spark job + load, nightly) ---------------------------------

# Facts (Parquet per due date), Spark's results and its logs live here. On a cluster this must be
# storage the driver and executors share (an NFS mount, or a path the cluster sees the same way).
ACCURACY_REPORT_DIR = Path(os.environ.get("ACCURACY_REPORT_DIR", BASE_DIR / "var" / "accuracy"))
# Where the Spark job runs: local[*] on this machine, or spark://host:7077, yarn, k8s://...
SPARK_MASTER = os.environ.get("SPARK_MASTER", "local[*]")
# Empty: run the job file with this Python (PySpark starts the driver here). Set it to launch with
# spark-submit instead, e.g. "spark-submit --master yarn --deploy-mode client --driver-memory 4g".
ACCURACY_SPARK_SUBMIT = os.environ.get("ACCURACY_SPARK_SUBMIT", "")
# An undelivered, uncancelled, unfailed message counts as lost this long after it was due.
ACCURACY_LOST_AFTER_SECONDS = env_number("ACCURACY_LOST_AFTER_SECONDS", "600", float)
# When beat runs the nightly report of the previous day (UTC, HH:MM); "off" disables it.
ACCURACY_REPORT_AT = os.environ.get("ACCURACY_REPORT_AT", "02:30").strip()
if ACCURACY_REPORT_AT.lower() != "off":
    try:
        _hour, _minute = (int(part) for part in ACCURACY_REPORT_AT.split(":"))
        _nightly = crontab(hour=_hour, minute=_minute)
    except ValueError:
        raise ImproperlyConfigured(
            f"ACCURACY_REPORT_AT must be HH:MM (UTC) or off, not {ACCURACY_REPORT_AT!r}"
        ) from None
    CELERY_BEAT_SCHEDULE["accuracy-report-nightly"] = {
        "task": task_names.ACCURACY_NIGHTLY,
        "schedule": _nightly,
        "options": {"expires": 6 * 3600},  # a beat that was down all night does not pile up runs
    }

# --- retention: finished messages move to a Parquet archive, then leave the table ------------


def env_duration(name: str, default: str, *, off: bool = False) -> timedelta | None:
    """A duration such as 90s, 15m, 12h or 7d (``off`` where allowed); a bad one stops start-up."""
    value = os.environ.get(name) or default
    try:
        return durations.parse_duration_or_off(value, name=name) if off else durations.parse_duration(value, name=name)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None


# How long a delivered or cancelled message stays in PostgreSQL after it finished, and a failed
# one (people may still republish it). An idempotency key is unique within this window.
DELAY_RETENTION = env_duration("DELAY_RETENTION", "7d")
DELAY_FAILED_RETENTION = env_duration("DELAY_FAILED_RETENTION", "30d")
# Where finished messages go before they leave the table: Parquet, one due_date=YYYY-MM-DD
# directory per day (empty: ACCURACY_REPORT_DIR/archive, beside the report's files). On a Spark
# cluster, storage the executors see under the same path.
DELAY_ARCHIVE_DIR = os.environ.get("DELAY_ARCHIVE_DIR", "")
DELAY_ARCHIVE_PAYLOADS = env_bool("DELAY_ARCHIVE_PAYLOADS", True)
# Days of the archive older than this are deleted by the prune (off: kept for ever).
DELAY_ARCHIVE_RETENTION = env_duration("DELAY_ARCHIVE_RETENTION", "400d", off=True)
# Rows archived into one file and deleted in one transaction.
DELAY_PRUNE_BATCH = env_number("DELAY_PRUNE_BATCH", "100000")
# How often beat runs the prune (off: only by hand, manage.py prune_messages).
DELAY_PRUNE_EVERY = env_duration("DELAY_PRUNE_EVERY", "1h", off=True)
if DELAY_PRUNE_EVERY is not None:
    CELERY_BEAT_SCHEDULE["prune-finished-messages"] = {
        "task": task_names.PRUNE,
        "schedule": DELAY_PRUNE_EVERY.total_seconds(),
        "options": {"expires": DELAY_PRUNE_EVERY.total_seconds()},  # never a backlog of runs
    }

# --- the API ----------------------------------------------------------------------------------

# Per-user rate limit, "<number>/<second|minute|hour|day>" (a bulk request counts its messages),
# or "off". Shared by every web process through the "throttle" cache below.
_API_RATE = (os.environ.get("DELAY_API_RATE") or "6000/minute").strip()
if _API_RATE.lower() == "off":
    DELAY_API_RATE = None
elif re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _API_RATE):
    DELAY_API_RATE = _API_RATE
else:
    raise ImproperlyConfigured(f"DELAY_API_RATE must be like 6000/minute (or s, hour, day) or off, not {_API_RATE!r}")
# JSON request bodies nest at most this deep (arrays and objects); deeper is a 400.
DELAY_MAX_JSON_DEPTH = env_number("DELAY_MAX_JSON_DEPTH", "64")
if DELAY_MAX_JSON_DEPTH < 4:
    raise ImproperlyConfigured("DELAY_MAX_JSON_DEPTH must be at least 4 (a bulk request's payloads are at level 4)")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # a table in the platform's database (made by migrate, see scheduling/apps.py): every process sees it
    "throttle": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "dp_throttle_cache"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",  # first: 401 + WWW-Authenticate
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "scheduling.api.exceptions.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "scheduling.api.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["scheduling.api.throttles.ItemRateThrottle"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Delay platform API",
    "DESCRIPTION": "Schedule messages for delivery after any delay, with RabbitMQ as the timer.",
    "VERSION": "1.0.0",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
}
# A bulk request of 1,000 messages with modest payloads fits; single payloads are capped at
# 256 KiB by the scheduling service.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024
# Fail fast when the broker is away: a request that schedules a message must not hang; the
# row is the outbox and the sweeper publishes it once the broker is back.
# confirm_publish: a task Celery sends (a celery_task endpoint's handler above all) counts as
# sent only once the broker confirmed it; without it, a send into a connection the broker had
# just dropped was lost without an error while its message was already recorded as delivered.
CELERY_BROKER_TRANSPORT_OPTIONS = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
                                   "confirm_publish": True}
# Celery's Django fixup closes the database connection before and after every task unless this
# is set; reconnecting cost ~7 ms of every delivery's lateness. Reuse it for this many tasks
# (Django's CONN_MAX_AGE and health checks still apply).
CELERY_DB_REUSE_MAX = env_number("CELERY_DB_REUSE_MAX", "1000")

# Celery tasks with base DelayedTask: a countdown/eta closer than this keeps Celery's own path.
DELAY_CELERY_THRESHOLD_SECONDS = env_number("DELAY_CELERY_THRESHOLD_SECONDS", "0", float)
