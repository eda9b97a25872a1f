"""Settings, all from the environment (a ``.env`` file beside manage.py, or the file ENV_FILE
names, is read too; real environment variables win). Secure by default: DEBUG is off unless asked for, and without
DEBUG a missing SECRET_KEY stops start-up.

Every variable is declared once, in scheduling/config/specs.py: its parser, default, check
and doc. Here they are read (a bad value stops start-up with one line), made Django settings of
their own names (DEBUG, BROKER_URL, the DELAY_* ones, ...), and turned into Django's, Celery's and
django-axes' own settings."""

import os
from datetime import timedelta

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from delayplatform import __version__, logs
from scheduling.config import specs
from scheduling.core import task_names

BASE_DIR = specs.ROOT
# The release (delayplatform/__init__.py), for what scheduling/ shows of it: the admin's header, /api/
PLATFORM_VERSION = __version__
specs.load_env_file(os.environ)
_env = specs.read(os.environ)  # key -> value, each parsed and checked once
_name = specs.variable  # a variable's name, for the messages below
globals().update(specs.django_settings(_env))  # DEBUG, SECRET_KEY, BROKER_URL, DELAY_SHARDS, ...

if not _env["secret_key"]:
    if not _env["debug"]:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment or in .env "
            "(make run writes one), or set DEBUG=1 for local development."
        )
    SECRET_KEY = "insecure-development-only-key"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "axes",
    "scheduling",
]

MIDDLEWARE = [
    # first: /healthz and /readyz answer before the Host check and the HTTPS redirect (probes
    # send the pod's IP as Host, over plain HTTP); see scheduling/probes/health_views.py
    "scheduling.probes.health_views.HealthCheckMiddleware",
    # before anything reads a body: one over DELAY_MAX_BODY_BYTES is a 413, unread
    "scheduling.security.bodies.BodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "scheduling.audit.context.AuditContextMiddleware",  # who changed what, for the audit log
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

# PostgreSQL only (DATABASE_URL's parser refuses another database): the relay and the timeout manager
# rely on SELECT ... FOR UPDATE SKIP LOCKED, bulk writes on COPY and UPDATE ... FROM (VALUES ...),
# the dashboard on percentile_disc.
DATABASES = {
    "default": {**_env["database_url"], "CONN_MAX_AGE": _env["db_conn_max_age"], "CONN_HEALTH_CHECKS": True},
}

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

if not _env["debug"]:
    SESSION_COOKIE_HTTPONLY = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# Behind a TLS-terminating proxy: the header it sets to "https" on requests that came in over TLS
# (e.g. X-Forwarded-Proto). The proxy must set it on every request (and strip it from clients).
if _env["tls_proxy_header"]:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _env["tls_proxy_header"].upper().replace("-", "_"), "https")
    # the proxy's X-Forwarded-For names the client, so a login lockout hits the client, not the proxy
    AXES_CLIENT_IP_CALLABLE = "scheduling.security.client_ip.client_ip"
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)/?$"]  # probes and scrapers call over plain HTTP inside
# Production: HTTPS only, so that `manage.py check --deploy` is clean (docs/security.md). HSTS: a
# year; subdomains included; preload only when asked (it cannot be undone quickly).
if _env["production"]:
    if _env["debug"]:
        raise ImproperlyConfigured(f"{_name('production')}=1 and DEBUG=1 cannot go together")
    _key = _env["secret_key"]
    if len(_key) < 50 or len(set(_key)) < 5 or _key.startswith("django-insecure-"):
        raise ImproperlyConfigured(f"SECRET_KEY must be at least 50 random characters with {_name('production')}=1 "
                                   "(scripts/make-env.sh writes one)")
    if not _env["secrets_keys"]:  # a key of their own for webhook secrets, not one derived from SECRET_KEY
        raise ImproperlyConfigured(f"{_name('secrets_keys')} must be set with {_name('production')}=1: the keys that "
                                   "encrypt webhook secrets at rest (scripts/make-env.sh writes one)")
    if not _env["metrics_token"]:  # behind a proxy on this host every request is from 127.0.0.1
        raise ImproperlyConfigured(f"{_name('metrics_token')} must be set with {_name('production')}=1: forwarded "
                                   "requests read the metrics only with it (scripts/make-env.sh writes one)")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = _env["hsts_seconds"]
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env["hsts_include_subdomains"]
    SECURE_HSTS_PRELOAD = _env["hsts_preload"]
    if not SECURE_HSTS_PRELOAD:  # a decision, not an oversight (docs/security.md)
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# Failed logins (admin, and API basic auth) are limited by django-axes: after this many failures
# for one username from one address, that pair is locked out for the cool-off time.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = _env["login_failure_limit"]
AXES_COOLOFF_TIME = timedelta(minutes=_env["login_cooloff_minutes"])
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # its start-up banner in every process's log

# Web and worker log through this (delayplatform/logs.py): LOG_FORMAT plain or json; Celery's lines
# about idle runs of the periodic tasks are dropped; one line per delivery batch (scheduling.deliveries).
LOGGING_CONFIG = "delayplatform.logs.configure"
LOGGING = logs.config(log_format=_env["log_format"], root_level=_env["log_level"],
                      deliveries_level=_env["log_deliveries_level"])

# --- Celery -----------------------------------------------------------------------------------

# The queue type of endpoint queues applies to Celery's task queues too ("quorum" on a cluster:
# replicated to every node, so a node's death loses nothing and stops nothing).
_TASK_QUEUE_ARGUMENTS = {"x-queue-type": "quorum"} if _env["queue_type"] == "quorum" else None
CELERY_BROKER_URL = _env["broker_url"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Every task that comes out of the cascade goes through the message lifecycle in the worker:
# recorded delivered; skipped if cancelled or a duplicate (scheduling/celery/claim.py).
CELERY_TASK_ANNOTATIONS = ["scheduling.celery.claim.ClaimBeforeStart"]
# Celery's consumer, with native delayed delivery's setup once per worker instead of on every
# reconnect (it held the consumer ~17 s after a cluster node's loss): scheduling/celery/consumer.py
CELERY_WORKER_CONSUMER = "scheduling.celery.consumer:Consumer"

_RELAY_QUEUE = _env["relay_queue"]
CELERY_TASK_QUEUES = [
    Queue("celery", Exchange("celery", type="direct"), routing_key="celery", queue_arguments=_TASK_QUEUE_ARGUMENTS),
    Queue(_RELAY_QUEUE, Exchange(_RELAY_QUEUE, type="direct"), routing_key=_RELAY_QUEUE,
          queue_arguments=_TASK_QUEUE_ARGUMENTS),
]
CELERY_TASK_ROUTES = {"scheduling.relay.*": {"queue": _RELAY_QUEUE}, "scheduling.schedules.*": {"queue": _RELAY_QUEUE}}
CELERY_BEAT_SCHEDULE = {
    "sweep-pending-messages": {
        "task": task_names.RELAY_SWEEP,
        "schedule": _env["sweep_seconds"],
        "options": {"expires": 10 * _env["sweep_seconds"]},
    },
    "publish-due-timeouts": {
        "task": task_names.RELAY_TIMEOUTS,
        "schedule": 1.0,
        "options": {"expires": 5},
    },
    "create-schedule-runs": {
        "task": task_names.SCHEDULE_RUNS,
        "schedule": _env["schedules_every_seconds"],
        "options": {"expires": 2 * _env["schedules_every_seconds"]},
    },
    "drain-unroutable": {
        "task": task_names.DRAIN_UNROUTABLE,
        "schedule": 5.0,
        "options": {"expires": 30},
    },
    "sweep-ordering": {  # waiting messages of an ordering key a lost wake left (messages/ordering.py)
        "task": task_names.ORDERING_SWEEP,
        "schedule": 5.0,
        "options": {"expires": 30},
    },
}

# --- the nightly accuracy report and the prune -------------------------------------------------

if _env["accuracy_report_at"] is not None:  # UTC
    CELERY_BEAT_SCHEDULE["accuracy-report-nightly"] = {
        "task": task_names.ACCURACY_NIGHTLY,
        "schedule": crontab(hour=_env["accuracy_report_at"].hour, minute=_env["accuracy_report_at"].minute),
        "options": {"expires": 6 * 3600},  # a beat that was down all night does not pile up runs
    }
if _env["prune_every"] is not None:  # finished messages move to the Parquet archive, then leave the table
    CELERY_BEAT_SCHEDULE["prune-finished-messages"] = {
        "task": task_names.PRUNE,
        "schedule": _env["prune_every"].total_seconds(),
        "options": {"expires": _env["prune_every"].total_seconds()},  # never a backlog of runs
    }

# --- the API ----------------------------------------------------------------------------------

# The per-user rate limit (DELAY_API_RATE) is shared by every web process through the "throttle" cache.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # a table in the platform's database (made by migrate, see scheduling/apps.py): every process sees it
    "throttle": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "dp_throttle_cache"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "scheduling.teams.authentication.ApiKeyAuthentication",  # first: 401 + WWW-Authenticate
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "scheduling.api.exceptions.exception_handler",
    # JSON only: a form or multipart body is a 415 (multipart streamed uploads past any memory limit)
    "DEFAULT_PARSER_CLASSES": ["scheduling.api.parsers.DepthLimitedJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["scheduling.api.throttles.ItemRateThrottle", "scheduling.api.throttles.TeamRateThrottle",
                                 "scheduling.api.throttles.KeyRateThrottle"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Delay platform API",
    "DESCRIPTION": "Schedule messages for delivery after any delay, with RabbitMQ as the timer.",
    "VERSION": PLATFORM_VERSION,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
}
# One limit on request bodies, declared in specs (DELAY_MAX_BODY_BYTES): the body-limit middleware
# answers 413 above it before anything reads the body (scheduling/security/bodies.py); Django's own
# check of form bodies uses the same value. Single payloads are capped by the scheduling service.
DATA_UPLOAD_MAX_MEMORY_SIZE = _env["max_body_bytes"]
# Fail fast when the broker is away: a request that schedules a message must not hang; the
# row is the outbox and the sweeper publishes it once the broker is back.
# confirm_publish: a task Celery sends (a celery_task endpoint's handler above all) counts as
# sent only once the broker confirmed it; without it, a send into a connection the broker has
# just dropped is lost without an error while its message is already recorded as delivered.
CELERY_BROKER_TRANSPORT_OPTIONS = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
                                   "confirm_publish": True}
# Celery's Django fixup closes the database connection before and after every task unless
# CELERY_DB_REUSE_MAX is set (it is, from the environment); reconnecting cost ~7 ms of every
# delivery's lateness. Django's CONN_MAX_AGE and health checks still apply.
