"""Every environment variable the platform reads, declared once: its name, how its text is read
and checked (a parser), its default as one would write it in ``.env``, an example, one line of
doc, and where it goes.

- ``delayplatform/settings.py`` reads them all with :func:`read` at start-up: a value that cannot
  work stops start-up with one line naming the variable (manage.py prints it as
  ``configuration error: ...``). Each one marked ``setting`` becomes the Django setting of its own
  name, parsed (a CIDR list is a tuple of networks, DELAY_SHARDS a dict); settings.py derives the
  rest (DATABASES, LOGGING, AXES_*, SECURE_*, the beat schedule) from the values.
- ``scheduling/conf.py``'s ``conf()`` is a frozen dataclass (``DelaySettings``, written out there
  from the specs marked ``conf`` by ``manage.py settings_reference``), read back from Django settings: a typed value (settings.py's, or one a test sets with
  ``override_settings``) is only checked, text is parsed as from the environment.
- the tables under "Every setting" on ``docs/reference/configuration.md`` are written from them
  (``manage.py settings_reference``; tests/scheduling/test_conf.py fails while the page differs).

Nothing else in ``delayplatform/``, ``scheduling/``, ``rabbit/`` or ``topology/`` spells a
``DELAY_*`` name: code reads values through ``conf()``, and a message that names a variable asks
:func:`variable` for it (tests/test_layout.py checks both). Importing this needs no Django
settings (settings.py imports it): the standard library, Django's exceptions, dj-database-url,
python-dotenv and pure modules of ``scheduling/`` and ``topology/``.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import time, timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from topology import cascade

from . import durations
from .observability import metrics_access
from .security import guards

ROOT = Path(__file__).resolve().parent.parent  # beside manage.py: .env, and where relative paths start


def _either(options: Iterable[str]) -> str:
    """("a", "b", "c") -> "a, b or c"."""
    options = list(options)
    return ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]


# --- parsers: the text of a variable -> a value, or one line saying why not -----------------------


class Parser:
    """Reads a variable's text (:meth:`parse`, from the environment) and checks a value given as
    it is (:meth:`check`: Django's setting, already parsed, or a test's ``override_settings``).
    Both raise ImproperlyConfigured with one line that names the variable."""

    type: Any = str  # the value's type: the annotation of conf()'s field

    def parse(self, text: str, name: str):
        raise NotImplementedError

    def check(self, value, name: str):
        raise ImproperlyConfigured(f"{name} must be text, not {value!r}")

    def coerce(self, value, name: str):
        return self.parse(value, name) if isinstance(value, str) else self.check(value, name)


class Text(Parser):
    def __init__(self, *, strip: bool = True):
        self.strip = strip

    def parse(self, text, name):
        return text.strip() if self.strip else text


class Items(Parser):
    """A comma-separated list (spaces and empty items ignored): a list, or a tuple (``kind``)."""

    def __init__(self, kind: type = tuple):
        self.kind = kind
        self.type = list[str] if kind is list else tuple[str, ...]

    def parse(self, text, name):
        return self.kind(item.strip() for item in text.split(",") if item.strip())

    def check(self, value, name):
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return self.parse(",".join(value), name)
        return super().check(value, name)


class Boolean(Parser):
    type = bool
    ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

    def parse(self, text, name):
        word = text.strip().lower()
        if word in self.ON or word in self.OFF:
            return word in self.ON
        raise ImproperlyConfigured(f"{name} must be on or off (1/0, true/false, yes/no), not {text!r}")

    def check(self, value, name):
        if isinstance(value, bool):
            return value
        raise ImproperlyConfigured(f"{name} must be on or off, not {value!r}")


class Integer(Parser):
    """A whole number; ``min``/``max`` bound it (``off``: the value that turns the thing off,
    named in the message; ``why``: the reason for the bound)."""

    type = int

    def __init__(self, *, min: int | None = None, max: int | None = None, off: int | None = None, why: str = ""):
        self.min, self.max, self.off, self.why = min, max, off, why

    def parse(self, text, name):
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be a whole number, not {text!r}") from None
        return self.check(value, name)

    def check(self, value, name):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}")
        why = f" ({self.why})" if self.why else ""
        if self.min is not None and self.max is not None and not self.min <= value <= self.max:
            low = f"{self.min} (off)" if self.off == self.min else str(self.min)
            raise ImproperlyConfigured(f"{name} must be {low} to {self.max}{why}, not {value!r}")
        if self.min is not None and value < self.min:
            raise ImproperlyConfigured(f"{name} must be at least {self.min}{why}, not {value!r}")
        return value


class Number(Parser):
    """A number (float); ``min``: at least, ``above``: more than."""

    type = float

    def __init__(self, *, min: float | None = None, above: float | None = None):
        self.min, self.above = min, above

    def parse(self, text, name):
        try:
            value = float(text.strip())
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be a number, not {text!r}") from None
        return self.check(value, name)

    def check(self, value, name):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ImproperlyConfigured(f"{name} must be a number, not {value!r}")
        value = float(value)
        if self.above is not None and not value > self.above:
            raise ImproperlyConfigured(f"{name} must be more than {self.above:g}, not {value!r}")
        if self.min is not None and not value >= self.min:
            raise ImproperlyConfigured(f"{name} must be at least {self.min:g}, not {value!r}")
        return value


class Choice(Parser):
    """One of a few words (in lower case)."""

    def __init__(self, *options: str):
        self.options = options

    def parse(self, text, name):
        word = text.strip().lower()
        if word not in self.options:
            raise ImproperlyConfigured(f"{name} must be {_either(self.options)}, not {word!r}")
        return word


class LogLevel(Parser):
    """A logging level's name (what logging knows: WARN too)."""

    def parse(self, text, name):
        level = text.strip().upper()
        if not isinstance(logging.getLevelName(level), int):
            raise ImproperlyConfigured(f"{name} must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {level!r}")
        return level


class Version(Parser):
    """The name of a cascade version topology/cascade.py defines."""

    def parse(self, text, name):
        version = text.strip()
        if version not in cascade.VERSIONS:
            raise ImproperlyConfigured(f"{name} is {version!r}; known versions: {', '.join(cascade.VERSIONS)}")
        return version


class Shards(Parser):
    """``v3=4,v2=2`` (or a dict, from tests' settings) -> {"v3": 4, "v2": 2}: a known version each,
    named once, with a whole number of shards from 1 to cascade.MAX_SHARDS."""

    type = dict[str, int]

    def parse(self, text, name):
        items = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            version, equals, count = item.partition("=")
            if not equals:
                raise ImproperlyConfigured(f"{name}: {item!r} is not VERSION=COUNT (e.g. {name}=v3=4,v2=2)")
            items.append((version.strip(), count.strip()))
        return self._shards(items, name)

    def check(self, value, name):
        if isinstance(value, Mapping):
            shards = self._shards([(str(version), count) for version, count in value.items()], name)
            return value if shards == value and isinstance(value, dict) else shards  # settings.py's: as it is
        return super().check(value, name)

    @staticmethod
    def _shards(items, name) -> dict[str, int]:
        shards: dict[str, int] = {}
        for version, count in items:
            if version not in cascade.VERSIONS:
                raise ImproperlyConfigured(
                    f"{name} names the unknown version {version!r}; known versions: {', '.join(cascade.VERSIONS)}")
            if version in shards:
                raise ImproperlyConfigured(f"{name} names {version} twice")
            try:
                number = count if isinstance(count, int) and not isinstance(count, bool) else int(str(count), 10)
            except ValueError:
                raise ImproperlyConfigured(f"{name}: the shards of {version} must be a whole number, not {count!r}") \
                    from None
            if not 1 <= number <= cascade.MAX_SHARDS:
                raise ImproperlyConfigured(f"{name}: {version} may have 1 to {cascade.MAX_SHARDS} shards, not {number}")
            shards[version] = number
        return shards


class Networks(Parser):
    """CIDRs, comma-separated (or a list of them, or of networks) -> a tuple of networks."""

    type = tuple[guards.Network, ...]

    def parse(self, text, name):
        return self.check(text, name)

    def check(self, value, name):
        if isinstance(value, tuple) and all(isinstance(item, guards.Network) for item in value):
            return value  # parsed already (settings.py's)
        try:
            return guards.parse_networks(value)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from None


class ApiRate(Parser):
    """``<number>/<second|minute|hour|day>`` (s, m, h, d and sec, min too), or ``off`` (None)."""

    type = str | None
    RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")

    def parse(self, text, name):
        rate = text.strip()
        if rate.lower() == "off":
            return None
        if not self.RATE.fullmatch(rate):
            raise ImproperlyConfigured(f"{name} must be like 6000/minute (or s, hour, day) or off, not {rate!r}")
        return rate

    def check(self, value, name):
        return None if value is None else super().check(value, name)


class ApiRateGroups(Parser):
    """``partners=100/second,batch=off`` (or a dict, from tests' settings) -> {"partners":
    "100/second", "batch": None}: a Django group's members get its rate instead of DELAY_API_RATE."""

    type = dict[str, str | None]

    def parse(self, text, name):
        items = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            group, equals, rate = item.partition("=")
            if not equals or not group.strip():
                raise ImproperlyConfigured(f"{name}: {item!r} is not GROUP=RATE (e.g. {name}=partners=100/second)")
            items[group.strip()] = rate
        return self.check(items, name)

    def check(self, value, name):
        if not isinstance(value, Mapping):
            return super().check(value, name)
        return {str(group): ApiRate().coerce(rate, f"{name} ({group})") for group, rate in value.items()}


class TimeOfDay(Parser):
    """``HH:MM`` (UTC) -> a time, or ``off`` (None)."""

    type = time | None

    def parse(self, text, name):
        word = text.strip()
        if word.lower() == "off":
            return None
        try:
            hour, minute = (int(part, 10) for part in word.split(":"))
            return time(hour, minute)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be HH:MM (UTC) or off, not {word!r}") from None

    def check(self, value, name):
        return value if value is None or isinstance(value, time) else super().check(value, name)


class Duration(Parser):
    """``90s``, ``15m``, ``12h``, ``7d`` (scheduling/durations.py) -> a timedelta; ``off`` (None)
    where allowed."""

    def __init__(self, *, off: bool = False):
        self.off = off
        self.type = timedelta | None if off else timedelta

    def parse(self, text, name):
        try:
            if self.off:
                return durations.parse_duration_or_off(text, name=name)
            return durations.parse_duration(text, name=name)
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None

    def check(self, value, name):
        if (value is None and self.off) or (isinstance(value, timedelta) and value >= timedelta(0)):
            return value
        return super().check(value, name)


class Directory(Parser):
    """A path (a relative one starts beside manage.py); empty: None where ``optional``."""

    def __init__(self, *, optional: bool = False):
        self.optional = optional
        self.type = Path | None if optional else Path

    def parse(self, text, name):
        return self.check(text.strip(), name)

    def check(self, value, name):
        if value is None and self.optional:
            return None
        if not isinstance(value, (str, os.PathLike)):
            return super().check(value, name)
        if str(value) == "":
            if self.optional:
                return None
            raise ImproperlyConfigured(f"{name} must be a directory's path")
        return ROOT / Path(value).expanduser()  # an absolute path stays as it is


class Header(Parser):
    """An HTTP header's name (letters, digits, dashes), or nothing."""

    def parse(self, text, name):
        header = text.strip()
        if header and not re.fullmatch(r"[A-Za-z0-9-]+", header):
            raise ImproperlyConfigured(f"{name} must be a header name, not {header!r}")
        return header


class FernetKeys(Parser):
    """Comma-separated Fernet keys (32 url-safe base64 bytes, as ``Fernet.generate_key()`` writes
    them) -> a tuple of them; empty: none. Checked with the standard library (this module is
    imported before Django, cryptography is not); a bad key is named by its place, never shown."""

    type = tuple[str, ...]
    KEY = re.compile(r"[A-Za-z0-9_-]{43}=")

    def parse(self, text, name):
        return self.check(tuple(key.strip() for key in text.split(",") if key.strip()), name)

    def check(self, value, name):
        if not isinstance(value, (list, tuple)) or not all(isinstance(key, str) for key in value):
            return super().check(value, name)
        keys = tuple(key.strip() for key in value if key.strip())
        for place, key in enumerate(keys, 1):
            if not self.KEY.fullmatch(key) or len(base64.urlsafe_b64decode(key)) != 32:
                raise ImproperlyConfigured(
                    f"{name}: key {place} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes, "
                    "as scripts/make-env.sh writes)")
        if len(set(keys)) != len(keys):
            raise ImproperlyConfigured(f"{name} names a key twice")
        return keys


class DatabaseUrl(Parser):
    """A dj-database-url URL of a PostgreSQL database -> Django's DATABASES entry."""

    type = dict

    def parse(self, text, name):
        try:
            database = dj_database_url.parse(text.strip())
        except ValueError:
            database = {"ENGINE": "an unknown kind of database"}
        if database.get("ENGINE") != "django.db.backends.postgresql":
            raise ImproperlyConfigured(
                f"{name} must name a PostgreSQL database (postgres://...), not {database.get('ENGINE')}")
        return database


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

    def __post_init__(self):
        if not self.key:
            object.__setattr__(self, "key", self.env.removeprefix("DELAY_").lower())

    def read(self, environ: Mapping[str, str]):
        """The value the environment gives (unset or empty: the default)."""
        text = environ.get(self.env) or ""
        return self.parse.parse(text if text.strip() else self.default, self.env)

    def coerce(self, value):
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
             "cores, delivery comes first and the API answers slower ([Scaling](../scaling.md))", "10",
             setting=False),
    ),
    *_group(
        "Production and security",
        Spec("DELAY_PRODUCTION", Boolean(), "off", "HTTPS only: SSL redirect (not for `/healthz`, `/readyz`, "
             "`/metrics`), HSTS, secure session and CSRF cookies; needs a strong `SECRET_KEY`, "
             "`DELAY_SECRETS_KEYS` and `DEBUG` off ([Security](../security.md#production-settings-delay_production))",
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
        "The database",
        Spec("DATABASE_URL", DatabaseUrl(), "postgres://postgres:postgres@127.0.0.1:5432/delayplatform",
             "the PostgreSQL database, as a dj-database-url URL", "postgres://user:pw@db.example:5432/delayplatform",
             setting=False),
        Spec("DB_CONN_MAX_AGE", Integer(min=0), "60", "seconds a database connection is reused (with health "
             "checks)", "300", setting=False),
        Spec("CELERY_DB_REUSE_MAX", Integer(min=0), "1000", "tasks a worker process runs on one database "
             "connection (reconnecting costs milliseconds of each delivery)", "100"),
    ),
    *_group(
        "The broker and the cascades",
        Spec("BROKER_URL", Text(), "amqp://guest:guest@127.0.0.1:5672//", "RabbitMQ (cascade and Celery); a "
             "cluster as `amqp://a:5672/v;amqp://b:5672/v;amqp://c:5672/v` ([Cluster](../operations/cluster.md))",
             "amqp://user:pw@rabbit1:5672/", conf=True),
        Spec("RABBITMQ_MANAGEMENT_URL", Text(), "", "management API, for verify and queue depths; several nodes "
             "separated by `;`", "http://user:pw@rabbit1:15672", conf=True, key="management_url",
             shown_default="each broker node's host, port 15672"),
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
             "give it the cores the worker may use) ([Scaling](../scaling.md))", "4", conf=True),
        Spec("DELAY_DELIVERY_BATCH", Integer(min=1), "500", "due messages the delivery loop records per "
             "transaction", "200", conf=True),
        Spec("DELAY_DELIVERY_PREFETCH", Integer(min=1), "20000", "unacked messages the delivery loop may hold",
             "5000", conf=True),
        Spec("DELAY_RESCUE_AFTER_MS", Integer(min=0), "1000", "a message this overdue whose copy the broker still "
             "holds is published again to its version's delivery exchange by the delivery loop (the copy that comes second "
             "is a suppressed duplicate); `0`: never ([Reliability](../reliability.md))", "2000", conf=True),
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
        Spec("DELAY_WEBHOOK_CONCURRENCY", Integer(min=1), "512", "webhook calls in flight at once per worker (one "
             "event loop; endpoints share them fairly)", "1024", conf=True),
        Spec("DELAY_WEBHOOK_ENDPOINT_CONCURRENCY", Integer(min=1), "64", "webhook calls in flight per endpoint and "
             "worker (a bulkhead: one slow receiver cannot take every call; `max_concurrent` lowers it across "
             "workers)", "16", conf=True),
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
    ),
    *_group(
        "Teams, keys and the audit log",
        Spec("DELAY_API_KEY_EXPIRES", Duration(), "90d", "how long a new API key lasts when its maker names no "
             "expiry ([Teams](../guides/teams.md#api-keys))", "30d", conf=True),
        Spec("DELAY_API_KEY_MAX_EXPIRES", Duration(), "365d", "the longest expiry a key may be given", "90d",
             conf=True),
        Spec("DELAY_TEAM_MAX_IN_FLIGHT", Integer(min=1), "1000000", "messages a team may have pending or published "
             "at once (a team's own quota in the admin wins; [quotas](../guides/teams.md#quotas))", "100000",
             conf=True),
        Spec("DELAY_TEAM_MAX_SCHEDULES", Integer(min=0), "1000", "recurring schedules a team may keep", "200",
             conf=True),
        Spec("DELAY_TEAM_MAX_ENDPOINTS", Integer(min=0), "100", "endpoints a team may have", "20", conf=True),
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
        Spec("DELAY_METRICS_ALLOWED_NETWORKS", Networks(), metrics_access.DEFAULT_NETWORKS, "CIDRs whose clients "
             "may read `/metrics` and the workers' metrics ports; others get 403 ([Metrics](../metrics.md))",
             "10.0.0.0/8", conf=True, shown_default="loopback and private ranges "
             f"(`{metrics_access.DEFAULT_NETWORKS.replace(',', ', ')}`)"),
        Spec("DELAY_METRICS_TOKEN", Text(), "", "when set, `/metrics` and the workers' metrics ports ask for "
             "`Authorization: Bearer <token>`", "…", conf=True, shown_default="— (none)"),
        Spec("DELAY_METRICS_CACHE_SECONDS", Number(above=0), "15", "how often `/metrics` reads its database and "
             "management API figures (in the background: a scrape never waits)", "30", conf=True),
        Spec("DELAY_WORKER_METRICS_PORT", Integer(min=0, max=65535, off=0), "9808", "the port each Celery worker "
             "serves its metrics on (`0`: none)", "9900", conf=True),
        Spec("DELAY_WORKER_METRICS_ADDR", Text(), "127.0.0.1", "the address each Celery worker serves its "
             "metrics on", "0.0.0.0", conf=True),
        Spec("PROMETHEUS_MULTIPROC_DIR", Text(), "", "where a server's processes keep their metrics (prometheus "
             "client's multiprocess mode; read by `scheduling/metrics_dir.py` before Django starts); one per "
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


# --- the reference page -------------------------------------------------------------------------

REFERENCE = ROOT / "docs" / "reference" / "configuration.md"
BEGIN = ("<!-- Written from scheduling/setting_specs.py by `manage.py settings_reference`: edit the specs "
         "there, not these tables. -->")
END = "<!-- End of the tables written from the specs. -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_table() -> str:
    """The reference page's tables, one per group: variable, default, example, meaning."""
    lines = []
    for group in dict.fromkeys(spec.group for spec in SPECS):
        lines += [f"### {group}", "", "| variable | default | example | meaning |", "|---|---|---|---|"]
        for spec in (s for s in SPECS if s.group == group):
            default = spec.shown_default or (f"`{spec.default}`" if spec.default else "—")
            lines.append(f"| `{spec.env}` | {_cell(default)} | `{_cell(spec.example)}` | {_cell(spec.doc)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _between_markers(text: str, begin: str, end: str, written: str, what: str) -> str:
    """``text`` with the part between its ``begin`` and ``end`` markers replaced by ``written``."""
    head, found_begin, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not (found_begin and found_end):
        raise ValueError(f"the {what} has no {begin!r} ... {end!r} markers")
    return f"{head}{begin}{written}{end}{tail}"


def reference_page(text: str) -> str:
    """The page ``text`` with the part between BEGIN and END written anew."""
    return _between_markers(text, BEGIN, END, f"\n\n{reference_table()}\n\n", "page")


# --- conf()'s class, written out in conf.py -------------------------------------------------------

CONF = ROOT / "scheduling" / "conf.py"
CLASS_BEGIN = "# --- DelaySettings: written from setting_specs.py by `manage.py settings_reference` (edit the specs) ---"
CLASS_END = "# --- end of DelaySettings ---"
_TYPE_NAMES = {"datetime.timedelta": "timedelta", "pathlib.Path": "Path"}


def _type_source(kind) -> str:
    text = kind.__name__ if isinstance(kind, type) and kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}" if isinstance(kind, type) else repr(kind))
    for long, short in _TYPE_NAMES.items():
        text = text.replace(long, short)
    return text


def _docstring(doc: str) -> str:
    text = "\n    ".join(textwrap.wrap(doc.replace("\\", "\\\\"), width=100, break_on_hyphens=False))
    return f'"""{text}"""'


def conf_class() -> str:
    """conf()'s class as the specs make it: a field per spec marked ``conf``, its type the
    parser's, written out so that editors and type checkers follow ``conf().delivery_batch``."""
    fields = "\n".join(f"    {spec.key}: {_type_source(spec.parse.type)}\n    {_docstring(spec.doc)}"
                       for spec in SPECS if spec.conf)
    return ('@dataclass(frozen=True)\nclass DelaySettings:\n    """The platform\'s settings, read from Django\'s (conf() below)."""\n\n'
            f"{fields}\n")


def conf_module(text: str) -> str:
    """conf.py's ``text`` with its class between CLASS_BEGIN and CLASS_END written anew."""
    return _between_markers(text, CLASS_BEGIN, CLASS_END, f"\n\n\n{conf_class()}\n\n", "module")
