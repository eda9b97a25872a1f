"""Every setting is declared once (scheduling/config/specs.py) and works: the environment
variable reaches the typed settings object (or Django's setting) it names, the configuration
reference (docs/reference/configuration.md) is written from the declarations and lists each
variable once, every example there can be read, bad values stop start-up with one line, and the
ones that once did nothing (DELAY_DEFAULT_VERSION, DELAY_BULK_MAX) now change what the platform
does."""

import io
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import time, timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from dotenv import dotenv_values

from harness.paths import ROOT
from scheduling.config import reference, specs
from scheduling.config.conf import DelaySettings, conf
from scheduling.config.specs import SPECS

KEYS = ("GAl1PNO9VDJpAQtAY-0WRF6YE6EE2U-PKIoaBZNXesk=", "BGpqEyGFG1SEDEI3qoMPlqWociYCroxHHmxuiXFFZ3M=")  # Fernet's form
# variable -> (value to set, Python expression read after start-up, what it must give)
TRACING = "__import__('scheduling.observability.tracing', fromlist=['ENABLED'])"
EFFECTS = {
    "SECRET_KEY": ("k" * 50, "settings.SECRET_KEY", "k" * 50),
    "DEBUG": ("1", "settings.DEBUG", True),
    "ALLOWED_HOSTS": ("a.example, b.example", "settings.ALLOWED_HOSTS", ["a.example", "b.example"]),
    "CSRF_TRUSTED_ORIGINS": ("https://a.example", "settings.CSRF_TRUSTED_ORIGINS", ["https://a.example"]),
    "DATABASE_URL": ("postgres://u:p@db.example:5433/dp", "[settings.DATABASES['default'][k] for k in "
                     "('HOST', 'PORT', 'NAME')]", ["db.example", 5433, "dp"]),
    "DB_CONN_MAX_AGE": ("7", "settings.DATABASES['default']['CONN_MAX_AGE']", 7),
    # tracing on in the process that set it up (the app's ready()), off by default
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("http://127.0.0.1:1", f"[{TRACING}.ENABLED, conf().otel_exporter_otlp_endpoint]",
                                    [True, "http://127.0.0.1:1"]),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ("http://127.0.0.1:1/v1/traces", f"{TRACING}.ENABLED", True),
    "OTEL_TRACES_EXPORTER": ("otlp", f"{TRACING}.ENABLED", True),
    "OTEL_SERVICE_NAME": ("dp-eu", "conf().otel_service_name", "dp-eu"),
    "LOG_LEVEL": ("WARNING", "settings.LOGGING['root']['level']", "WARNING"),
    "LOG_FORMAT": ("json", "[settings.LOG_FORMAT, settings.LOGGING['formatters']['console']]",
                   ["json", {"()": "delayplatform.logs.json_formatter"}]),
    "LOG_DELIVERIES_LEVEL": ("warning", "settings.LOGGING['loggers']['scheduling.deliveries']['level']", "WARNING"),
    "DELAY_READYZ_TIMEOUT_SECONDS": ("1.5", "conf().readyz_timeout_seconds", 1.5),
    "DELAY_READYZ_CACHE_SECONDS": ("0", "conf().readyz_cache_seconds", 0.0),
    "BROKER_URL": ("amqp://u:p@mq.example:5673/v", "[conf().broker_url, settings.CELERY_BROKER_URL]",
                   ["amqp://u:p@mq.example:5673/v"] * 2),
    "RABBITMQ_MANAGEMENT_URL": ("http://u:p@mq.example:15673", "broker().management_url",
                                "http://u:p@mq.example:15673"),
    "DELAY_BROKER_CONNECT_TIMEOUT_MS": ("1500", "[broker().connect_timeout, broker('amqp://other//').connect_timeout]",
                                        [1.5, 1.5]),
    "DELAY_DEFAULT_VERSION": ("v1", "conf().default_version", "v1"),
    "DELAY_SHARDS": ("v3=4, v2=2", "[conf().shards, configured_version('v3').shards, configured_version('v1').shards]",
                     [{"v3": 4, "v2": 2}, 4, 1]),
    "DELAY_QUEUE_TYPE": ("quorum", "[conf().queue_type, settings.CELERY_TASK_QUEUES[0].queue_arguments]",
                         ["quorum", {"x-queue-type": "quorum"}]),
    "DELAY_ARRIVAL_MARGIN_MS": ("300", "conf().arrival_margin_ms", 300),
    "DELAY_MAX_PAYLOAD_BYTES": ("4096", "conf().max_payload_bytes", 4096),
    "DELAY_BULK_MAX": ("50", "conf().bulk_max", 50),
    "DELAY_PUBLISH_WINDOW": ("64", "conf().publish_window", 64),
    "DELAY_PUBLISH_BATCH": ("250", "conf().publish_batch", 250),
    "DELAY_RELAY_GATHER_MS": ("2", "conf().relay_gather_ms", 2),
    "DELAY_SWEEP_SECONDS": ("3", "[conf().sweep_seconds, settings.CELERY_BEAT_SCHEDULE['sweep-pending-messages']"
                            "['schedule']]", [3.0, 3.0]),
    "DELAY_SWEEP_GRACE_SECONDS": ("1.5", "conf().sweep_grace_seconds", 1.5),
    "DELAY_HANDLER_MAX_RETRIES": ("2", "conf().handler_max_retries", 2),
    "DELAY_HANDLER_BACKOFF_SECONDS": ("0.5", "conf().handler_backoff_seconds", 0.5),
    "DELAY_WEBHOOK_TIMEOUT_SECONDS": ("4", "conf().webhook_timeout_seconds", 4.0),
    "DELAY_WEBHOOK_CONCURRENCY": ("3", "conf().webhook_concurrency", 3),
    "DELAY_WEBHOOK_TIMEOUT_MAX_SECONDS": ("30", "conf().webhook_timeout_max_seconds", 30.0),
    "DELAY_WEBHOOK_ENDPOINT_CONCURRENCY": ("7", "conf().webhook_endpoint_concurrency", 7),
    "DELAY_WEBHOOK_RESPONSE_MAX_BYTES": ("1000", "conf().webhook_response_max_bytes", 1000),
    "DELAY_WEBHOOK_EXCERPT_BYTES": ("100", "conf().webhook_excerpt_bytes", 100),
    "DELAY_WEBHOOK_RETRY_AFTER_MAX_SECONDS": ("60", "conf().webhook_retry_after_max_seconds", 60.0),
    "DELAY_WEBHOOK_CIRCUIT_FAILURES": ("3", "conf().webhook_circuit_failures", 3),
    "DELAY_WEBHOOK_CIRCUIT_SECONDS": ("2.5", "conf().webhook_circuit_seconds", 2.5),
    "DELAY_WEBHOOK_DISABLE_AFTER": ("2d", "conf().webhook_disable_after.total_seconds()", 172800.0),
    "DELAY_WEBHOOK_ALLOWED_NETWORKS": ("127.0.0.1/32, 10.1.0.0/16", "[str(n) for n in conf().webhook_allowed_networks]",
                                       ["127.0.0.1/32", "10.1.0.0/16"]),
    "DELAY_CELERY_TASK_ALLOWLIST": ("billing.tasks.*, reports.*", "conf().celery_task_allowlist",
                                    ["billing.tasks.*", "reports.*"]),
    "DELAY_SECRETS_KEYS": (f"{KEYS[0]}, {KEYS[1]}", "conf().secrets_keys", list(KEYS)),
    "DELAY_TIMEOUTS_LOOKAHEAD_MS": ("900", "conf().timeouts_lookahead_ms", 900),
    "DELAY_CONSUMER_SYNC_SECONDS": ("9", "conf().consumer_sync_seconds", 9.0),
    "DELAY_DELIVERY_BATCH": ("100", "conf().delivery_batch", 100),
    "DELAY_DELIVERY_PREFETCH": ("1000", "conf().delivery_prefetch", 1000),
    "DELAY_RESCUE_AFTER_MS": ("2500", "conf().rescue_after_ms", 2500),
    "DELAY_ENVELOPES": ("off", "conf().envelopes", False),
    "DELAY_ORDERING_KEYS": ("off", "conf().ordering_keys", False),
    "DELAY_DELIVERY_LOOP": ("off", "conf().delivery_loop", False),
    "DELAY_DELIVERY_PROCESSES": ("4", "conf().delivery_processes", 4),
    "DELAY_RELAY_QUEUE": ("dp.relay2", "[conf().relay_queue, settings.CELERY_TASK_ROUTES['scheduling.relay.*']"
                          "['queue']]", ["dp.relay2"] * 2),
    "DELAY_CELERY_THRESHOLD_SECONDS": ("60", "conf().celery_threshold_seconds", 60.0),
    "DELAY_SCHEDULES_EVERY_SECONDS": ("10", "[conf().schedules_every_seconds, "
                                      "settings.CELERY_BEAT_SCHEDULE['create-schedule-runs']['schedule']]", [10.0, 10.0]),
    "DELAY_SCHEDULES_AHEAD_SECONDS": ("300", "conf().schedules_ahead_seconds", 300.0),
    "DELAY_METRICS_TOKEN": ("scrape-secret", "conf().metrics_token", "scrape-secret"),
    "DELAY_METRICS_ALLOWED_NETWORKS": ("10.0.0.0/8, ::1", "[str(n) for n in conf().metrics_allowed_networks]",
                                       ["10.0.0.0/8", "::1/128"]),
    "DELAY_METRICS_CACHE_SECONDS": ("30", "conf().metrics_cache_seconds", 30.0),
    "DELAY_WORKER_METRICS_PORT": ("9900", "conf().worker_metrics_port", 9900),
    "DELAY_WORKER_METRICS_ADDR": ("0.0.0.0", "conf().worker_metrics_addr", "0.0.0.0"),
    "DELAY_API_RATE": ("100/hour", "conf().api_rate", "100/hour"),
    "DELAY_API_RATE_GROUPS": ("partners=5/second, batch=off", "conf().api_rate_groups",
                              {"partners": "5/second", "batch": None}),
    "DELAY_MAX_JSON_DEPTH": ("16", "conf().max_json_depth", 16),
    "DELAY_MAX_BODY_BYTES": ("4194304", "settings.DATA_UPLOAD_MAX_MEMORY_SIZE", 4194304),
    "DELAY_CLAIM_MARGIN_MS": ("5000", "conf().claim_margin_ms", 5000),
    "DELAY_MIGRATION_LOCK_TIMEOUT_MS": ("10000", "conf().migration_lock_timeout_ms", 10000),
    "DELAY_TASK_MAX_RERUNS": ("5", "conf().task_max_reruns", 5),
    "DELAY_API_KEY_EXPIRES": ("30d", "conf().api_key_expires.days", 30),
    "DELAY_API_KEY_MAX_EXPIRES": ("90d", "conf().api_key_max_expires.days", 90),
    "DELAY_INVITATION_EXPIRES": ("2d", "conf().invitation_expires.days", 2),
    "DELAY_TEAM_MAX_PENDING_INVITATIONS": ("20", "conf().team_max_pending_invitations", 20),
    "DELAY_TEAM_MAX_IN_FLIGHT": ("5000", "conf().team_max_in_flight", 5000),
    "DELAY_TEAM_MAX_IN_FLIGHT_BYTES": ("1048576", "conf().team_max_in_flight_bytes", 1048576),
    "DELAY_TEAM_MAX_SCHEDULES": ("20", "conf().team_max_schedules", 20),
    "DELAY_TEAM_MAX_ENDPOINTS": ("7", "conf().team_max_endpoints", 7),
    "DELAY_TEAM_MAX_SUBSCRIPTIONS": ("9", "conf().team_max_subscriptions", 9),
    "DELAY_TEAM_MIN_SCHEDULE_INTERVAL_SECONDS": ("60", "conf().team_min_schedule_interval_seconds", 60),
    "DELAY_TEAM_API_RATE": ("10/second", "conf().team_api_rate", "10/second"),
    "DELAY_KEY_API_RATE": ("off", "conf().key_api_rate", None),
    "DELAY_AUDIT_RETENTION": ("730d", "conf().audit_retention.days", 730),
    "DELAY_LOGIN_FAILURE_LIMIT": ("3", "settings.AXES_FAILURE_LIMIT", 3),
    "DELAY_LOGIN_COOLOFF_MINUTES": ("30", "settings.AXES_COOLOFF_TIME.total_seconds()", 1800.0),
    # DEBUG=1 above: production cannot be on here (tests/reliability/test_security.py runs it)
    "DELAY_PRODUCTION": ("off", "settings.DELAY_PRODUCTION", False),
    "DELAY_TLS_PROXY_HEADER": ("X-Forwarded-Proto",
                               "[conf().tls_proxy_header, list(settings.SECURE_PROXY_SSL_HEADER)]",
                               ["X-Forwarded-Proto", ["HTTP_X_FORWARDED_PROTO", "https"]]),
    "DELAY_HSTS_SECONDS": ("600", "settings.DELAY_HSTS_SECONDS", 600),
    "DELAY_HSTS_INCLUDE_SUBDOMAINS": ("0", "settings.DELAY_HSTS_INCLUDE_SUBDOMAINS", False),
    "DELAY_HSTS_PRELOAD": ("1", "settings.DELAY_HSTS_PRELOAD", True),
    "CELERY_DB_REUSE_MAX": ("10", "settings.CELERY_DB_REUSE_MAX", 10),
    "ACCURACY_REPORT_DIR": ("/tmp/dp-acc", "str(conf().accuracy_report_dir)", "/tmp/dp-acc"),
    "SPARK_MASTER": ("spark://s.example:7077", "conf().spark_master", "spark://s.example:7077"),
    "ACCURACY_SPARK_SUBMIT": ("spark-submit --master yarn", "conf().accuracy_spark_submit",
                              "spark-submit --master yarn"),
    "ACCURACY_LOST_AFTER_SECONDS": ("60", "conf().accuracy_lost_after_seconds", 60.0),
    "ACCURACY_REPORT_AT": ("off", "'accuracy-report-nightly' in settings.CELERY_BEAT_SCHEDULE", False),
    "DELAY_RETENTION": ("90s", "conf().retention.total_seconds()", 90.0),
    "DELAY_FAILED_RETENTION": ("12h", "conf().failed_retention.total_seconds()", 43200.0),
    "DELAY_ARCHIVE_DIR": ("/tmp/dp-archive", "str(conf().archive_dir)", "/tmp/dp-archive"),
    "DELAY_ARCHIVE_PAYLOADS": ("off", "conf().archive_payloads", False),
    "DELAY_ARCHIVE_RETENTION": ("off", "conf().archive_retention", None),
    "DELAY_PRUNE_BATCH": ("5000", "conf().prune_batch", 5000),
    "DELAY_ORPHAN_COPY_RETENTION": ("90d", "conf().orphan_copy_retention.days", 90),
    "DELAY_ORPHAN_COPIES_MAX_PER_QUEUE": ("1000", "conf().orphan_copies_max_per_queue", 1000),
    "DELAY_PRUNE_EVERY": ("15m", "settings.CELERY_BEAT_SCHEDULE['prune-finished-messages']['schedule']", 900.0),
}
ENV_FILE_SETS = ("DELAY_PUBLISH_BATCH", "77")  # ENV_FILE: a file of NAME=value lines; the environment wins
# declared, but with no effect a process started here could show: where each is tested instead
TESTED_ELSEWHERE = {"ENV_FILE": "test_each_variable_has_its_effect (ENV_FILE_SETS)",
                    "PROMETHEUS_MULTIPROC_DIR": "tests/scheduling/observability/test_metrics_dir.py",
                    "DELAY_WEB_NICE": "tests/test_gunicorn_conf.py"}


def start(env: dict, expressions: list[str]) -> subprocess.CompletedProcess:
    program = (
        "import json, django; from django.conf import settings; django.setup(); "
        "from scheduling.config.conf import broker, conf, configured_version; "
        f"print(json.dumps([{', '.join(expressions)}]))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in EFFECTS and k != "ENV_FILE"}
    return subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**clean, "DJANGO_SETTINGS_MODULE": "delayplatform.settings", **env})


def reference_page() -> str:
    return (ROOT / "docs" / "reference" / "configuration.md").read_text()


def documented_variables() -> list[str]:
    """The variables of the tables under "## Every setting" on the configuration reference page."""
    text = reference_page()
    tables = text[text.index("## Every setting"):]
    tables = tables[:tables.index("\n## ", 1)]
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", tables, re.M)


def test_every_declared_variable_is_documented_once_and_tested():
    declared = [spec.env for spec in SPECS]
    assert len(set(declared)) == len(declared) and len({spec.key for spec in SPECS}) == len(SPECS)
    assert documented_variables() == declared
    assert set(declared) == set(EFFECTS) | set(TESTED_ELSEWHERE)


def test_the_reference_page_is_written_from_the_declarations():
    text = reference_page()
    assert text == reference.reference_page(text), (
        "docs/reference/configuration.md differs from scheduling/config/specs.py: run manage.py settings_reference")
    for spec in SPECS:  # what each row says is the spec's
        row = next(line for line in text.splitlines() if line.startswith(f"| `{spec.env}` |"))
        assert f"`{spec.example}`" in row and spec.doc.replace("|", "\\|") in row
        assert (spec.shown_default or (f"`{spec.default}`" if spec.default else "—")) in row


def test_the_command_writes_the_page_and_checks_it(tmp_path, monkeypatch):
    page = tmp_path / "configuration.md"
    shutil.copy(ROOT / "docs" / "reference" / "configuration.md", page)
    monkeypatch.setattr(reference, "REFERENCE", page)
    monkeypatch.setattr(reference, "CONF", tmp_path / "conf.py")
    shutil.copy(ROOT / "scheduling" / "config" / "conf.py", tmp_path / "conf.py")
    monkeypatch.setattr(specs, "ROOT", tmp_path)
    call_command("settings_reference", "--check", stdout=io.StringIO())
    page.write_text(page.read_text().replace("| `DELAY_BULK_MAX` |", "| `DELAY_BULK_MAXIMUM` |"))
    with pytest.raises(CommandError, match="differs from scheduling/config/specs.py"):
        call_command("settings_reference", "--check", stdout=io.StringIO())
    call_command("settings_reference", stdout=io.StringIO())
    assert page.read_text() == (ROOT / "docs" / "reference" / "configuration.md").read_text()


def test_conf_s_class_is_written_from_the_declarations(tmp_path, monkeypatch):
    """config/conf.py's DelaySettings is what the specs make (a field per conf spec, its type the
    parser's), so an editor's view of conf() is the truth; the command rewrites it when a spec changes."""
    from dataclasses import fields

    from scheduling.config.conf import DelaySettings

    text = (ROOT / "scheduling" / "config" / "conf.py").read_text()
    assert text == reference.conf_module(text), (
        "scheduling/config/conf.py's DelaySettings differs from scheduling/config/specs.py: run manage.py settings_reference")
    assert [f.name for f in fields(DelaySettings)] == [spec.key for spec in SPECS if spec.conf]
    stale = tmp_path / "conf.py"
    stale.write_text(text.replace("    broker_url: str\n", "    broker_url: int\n"))
    monkeypatch.setattr(reference, "CONF", stale)
    with pytest.raises(CommandError, match="conf.py differs"):
        call_command("settings_reference", "--check", stdout=io.StringIO())
    call_command("settings_reference", stdout=io.StringIO())
    assert stale.read_text() == text


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.env)
def test_each_default_and_example_can_be_read(spec):
    """The default as a user would write it, and the example the page shows, both parse; and the
    example is not the default (it shows something one would change)."""
    assert spec.example != spec.default
    assert spec.parse.parse(spec.example, spec.env) != spec.parse.parse(spec.default, spec.env)


def test_the_pages_env_example_is_true():
    """Every line of the .env example on the reference page names a declared variable, with a
    value it accepts."""
    text = reference_page()
    block = text[text.index("```sh", text.index("## Example")):]
    block = block[len("```sh"):block.index("```", 5)]
    values = dotenv_values(stream=io.StringIO(block))
    assert len(values) >= 10 and set(values) <= {spec.env for spec in SPECS}
    read = specs.read(values)
    assert read["shards"] == {"v3": 3} and read["queue_type"] == "quorum" and read["production"] is True
    assert read["broker_url"].count(";") == 2 and read["retention"] == timedelta(days=7)


def test_the_declarations_need_no_django_settings():
    """settings.py imports them: importing them must not need settings, nor load models."""
    program = ("import sys; from scheduling.config import specs; from django.conf import settings; "
               "print(len(specs.SPECS), settings.configured, 'django.db.models' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.returncode == 0 and result.stdout.split() == [str(len(SPECS)), "False", "False"], result.stderr


def test_every_typed_setting_is_a_declared_django_setting():
    """conf()'s fields are the specs marked conf, each read back from the Django setting of its
    variable's name (so override_settings reaches it)."""
    assert list(DelaySettings.__dataclass_fields__) == [spec.key for spec in SPECS if spec.conf]
    assert all(spec.setting for spec in SPECS if spec.conf)


def test_settings_parse_each_value_once_and_conf_reuses_it():
    """settings.py keeps the parsed values (networks, shards, durations, paths): conf() checks
    them and takes them as they are, it does not parse their text again."""
    from django.conf import settings

    assert all(isinstance(n, (ipaddress.IPv4Network, ipaddress.IPv6Network))
               for n in settings.DELAY_WEBHOOK_ALLOWED_NETWORKS + settings.DELAY_METRICS_ALLOWED_NETWORKS)
    assert conf().webhook_allowed_networks is settings.DELAY_WEBHOOK_ALLOWED_NETWORKS
    assert conf().metrics_allowed_networks is settings.DELAY_METRICS_ALLOWED_NETWORKS
    assert conf().shards is settings.DELAY_SHARDS
    assert isinstance(settings.DELAY_RETENTION, timedelta) and isinstance(settings.ACCURACY_REPORT_DIR, Path)
    assert settings.ACCURACY_REPORT_AT is None or isinstance(settings.ACCURACY_REPORT_AT, time)


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("DELAY_SHARDS", "v3=2", {"v3": 2}),
    ("DELAY_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8, ::1", (ipaddress.ip_network("10.0.0.0/8"),
                                                           ipaddress.ip_network("::1/128"))),
    ("DELAY_CELERY_TASK_ALLOWLIST", ["a.*", " b.* "], ("a.*", "b.*")),
    ("DELAY_RETENTION", "12h", timedelta(hours=12)),
    ("DELAY_ARCHIVE_RETENTION", None, None),
    ("DELAY_API_RATE", "off", None),
    ("DELAY_DELIVERY_LOOP", "off", False),
    ("DELAY_SWEEP_SECONDS", 3, 3.0),
    ("DELAY_BULK_MAX", "7", 7),
    ("DELAY_SECRETS_KEYS", [f" {KEYS[1]} ", KEYS[0]], (KEYS[1], KEYS[0])),
])
def test_a_test_may_set_text_or_a_typed_value(settings, name, value, expected):
    setattr(settings, name, value)
    assert getattr(conf(), specs.BY_ENV[name].key) == expected


def test_each_variable_has_its_effect(tmp_path):
    env_file = tmp_path / "env"
    env_file.write_text(f"{ENV_FILE_SETS[0]}={ENV_FILE_SETS[1]}\nDELAY_PUBLISH_WINDOW=1\n")
    env = {name: value for name, (value, _, _) in EFFECTS.items()}
    env.pop(ENV_FILE_SETS[0])
    result = start({**env, "ENV_FILE": str(env_file)},
                   [expression for _, expression, _ in EFFECTS.values()] + ["conf().publish_batch"])
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    expected = [value for _, _, value in EFFECTS.values()]
    got = dict(zip(EFFECTS, values))
    got[ENV_FILE_SETS[0]] = values[-1]  # from the file
    assert got == {**dict(zip(EFFECTS, expected)), ENV_FILE_SETS[0]: int(ENV_FILE_SETS[1])}


@pytest.mark.parametrize(("name", "value", "says"), [
    ("DELAY_PUBLISH_WINDOW", "many", "DELAY_PUBLISH_WINDOW must be a whole number, not 'many'"),
    ("DELAY_SWEEP_SECONDS", "2s", "DELAY_SWEEP_SECONDS must be a number, not '2s'"),
    ("DATABASE_URL", "sqlite:///x.db", "DATABASE_URL must name a PostgreSQL database"),
    ("DELAY_QUEUE_TYPE", "mirrored", "DELAY_QUEUE_TYPE must be classic or quorum, not 'mirrored'"),
    ("ACCURACY_REPORT_AT", "half past two", "ACCURACY_REPORT_AT must be HH:MM"),
    ("DELAY_METRICS_ALLOWED_NETWORKS", "10.0.0.0/8,intranet",
     "DELAY_METRICS_ALLOWED_NETWORKS: 'intranet' is not a network (CIDR such as 127.0.0.1/32 or fd00::/8)"),
    ("DELAY_WORKER_METRICS_PORT", "70000", "DELAY_WORKER_METRICS_PORT must be 0 (off) to 65535, not 70000"),
    ("DELAY_METRICS_CACHE_SECONDS", "0", "DELAY_METRICS_CACHE_SECONDS must be more than 0, not 0.0"),
    ("DELAY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32,localhost",
     "DELAY_WEBHOOK_ALLOWED_NETWORKS: 'localhost' is not a network (CIDR such as 127.0.0.1/32 or fd00::/8)"),
    ("DELAY_API_RATE", "600 per minute", "DELAY_API_RATE must be like 6000/minute (or s, hour, day) or off"),
    ("DELAY_API_RATE_GROUPS", "partners", "DELAY_API_RATE_GROUPS: 'partners' is not GROUP=RATE"),
    ("DELAY_API_RATE_GROUPS", "partners=lots", "DELAY_API_RATE_GROUPS (partners) must be like 6000/minute"),
    ("DELAY_MAX_JSON_DEPTH", "3", "DELAY_MAX_JSON_DEPTH must be at least 4"),
    ("DELAY_MAX_BODY_BYTES", "1024", "DELAY_MAX_BODY_BYTES must be at least 65536"),
    ("DELAY_CLAIM_MARGIN_MS", "60001", "DELAY_CLAIM_MARGIN_MS must be 0 to 60000"),
    ("DELAY_LOGIN_COOLOFF_MINUTES", "0", "DELAY_LOGIN_COOLOFF_MINUTES must be more than 0, not 0.0"),
    ("DELAY_LOGIN_FAILURE_LIMIT", "0", "DELAY_LOGIN_FAILURE_LIMIT must be at least 1, not 0"),
    ("DELAY_SHARDS", "v9=2", "DELAY_SHARDS names the unknown version 'v9'; known versions: v1, v2, v3"),
    ("DELAY_DEFAULT_VERSION", "v9", "DELAY_DEFAULT_VERSION is 'v9'; known versions: v1, v2, v3"),
    ("DELAY_PUBLISH_BATCH", "0", "DELAY_PUBLISH_BATCH must be at least 1, not 0"),
    ("DELAY_DELIVERY_LOOP", "maybe", "DELAY_DELIVERY_LOOP must be on or off (1/0, true/false, yes/no), not 'maybe'"),
    ("DELAY_SWEEP_SECONDS", "0", "DELAY_SWEEP_SECONDS must be more than 0, not 0.0"),
    ("DATABASE_URL", "http://db.example/x", "DATABASE_URL must name a PostgreSQL database"),
    ("DELAY_TLS_PROXY_HEADER", "X-Forwarded-Proto=https", "DELAY_TLS_PROXY_HEADER must be a header name"),
    ("LOG_FORMAT", "xml", "LOG_FORMAT must be plain or json, not 'xml'"),
    ("LOG_LEVEL", "loud", "LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not 'LOUD'"),
    ("DELAY_READYZ_TIMEOUT_SECONDS", "0", "DELAY_READYZ_TIMEOUT_SECONDS must be more than 0, not 0.0"),
    ("DELAY_RETENTION", "7 days", "DELAY_RETENTION must be a duration such as 90s, 15m, 12h or 7d, not '7 days'"),
    ("DELAY_FAILED_RETENTION", "off", "DELAY_FAILED_RETENTION must be a duration such as 90s, 15m, 12h or 7d"),
    ("DELAY_PRUNE_EVERY", "hourly",
     "DELAY_PRUNE_EVERY must be a duration such as 90s, 15m, 12h or 7d, or off, not 'hourly'"),
    ("DELAY_ARCHIVE_RETENTION", "-1d", "DELAY_ARCHIVE_RETENTION must be a duration such as 90s, 15m, 12h or 7d"),
    ("DELAY_SECRETS_KEYS", f"{KEYS[0]},not-a-key", "DELAY_SECRETS_KEYS: key 2 of 2 is not a Fernet key"),
    ("DELAY_SECRETS_KEYS", KEYS[0][:-2] + "==", "DELAY_SECRETS_KEYS: key 1 of 1 is not a Fernet key"),
    ("DELAY_SECRETS_KEYS", f"{KEYS[0]},{KEYS[0]}", "DELAY_SECRETS_KEYS names a key twice"),
])
def test_bad_values_stop_start_up_with_one_line(name, value, says):
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "DJANGO_SETTINGS_MODULE": "delayplatform.settings",
                                             "SECRET_KEY": "x", name: value})
    assert result.returncode != 0
    assert says in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(("name", "value", "says"), [
    ("DELAY_DEFAULT_VERSION", "v9", "DELAY_DEFAULT_VERSION is 'v9'; known versions: v1, v2"),
    ("DELAY_PUBLISH_BATCH", 0, "DELAY_PUBLISH_BATCH must be at least 1, not 0"),
    ("DELAY_BULK_MAX", -1, "DELAY_BULK_MAX must be at least 1"),
])
def test_the_typed_object_refuses_values_that_cannot_work(settings, name, value, says):
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=re.escape(says)):
        conf()


@pytest.mark.parametrize(("value", "says"), [
    ("v9=2", "DELAY_SHARDS names the unknown version 'v9'; known versions: v1, v2, v3"),
    ("v3=four", "DELAY_SHARDS: the shards of v3 must be a whole number, not 'four'"),
    ("v3=2.5", "DELAY_SHARDS: the shards of v3 must be a whole number, not '2.5'"),
    ("v3=0", "DELAY_SHARDS: v3 may have 1 to 64 shards, not 0"),
    ("v3=65", "DELAY_SHARDS: v3 may have 1 to 64 shards, not 65"),
    ("v3", "DELAY_SHARDS: 'v3' is not VERSION=COUNT (e.g. DELAY_SHARDS=v3=4,v2=2)"),
    ("v3=2,v3=4", "DELAY_SHARDS names v3 twice"),
    ({"v3": 0}, "DELAY_SHARDS: v3 may have 1 to 64 shards, not 0"),
])
def test_shard_counts_that_cannot_work_are_refused(settings, value, says):
    settings.DELAY_SHARDS = value
    with pytest.raises(ImproperlyConfigured, match=re.escape(says)):
        conf()


@pytest.mark.parametrize(("value", "shards"), [
    ("", {}), (" v3 = 4 , ,v1=1", {"v3": 4, "v1": 1}), ("v2=64", {"v2": 64}), ({"v3": 2}, {"v3": 2}),
])
def test_shard_counts_and_the_configured_version(settings, value, shards):
    from scheduling.config.conf import configured_version

    settings.DELAY_SHARDS = value
    assert conf().shards == shards
    for name in ("v1", "v2", "v3"):
        version = configured_version(name, prefix="x.", levels=4)
        assert (version.name, version.prefix, version.levels, version.shards) == (name, "x.", 4, shards.get(name, 1))


def test_a_bad_shard_count_stops_a_command_with_one_line():
    result = subprocess.run([sys.executable, "manage.py", "explain_delay", "5", "billing"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": "delayplatform.settings", "SECRET_KEY": "x",
                                 "DELAY_SHARDS": "v3=x"})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "configuration error: DELAY_SHARDS: the shards of v3 must be a whole number, not 'x'"


def test_the_archive_lives_beside_the_reports_files_unless_set(settings, tmp_path):
    settings.DELAY_ARCHIVE_DIR, settings.ACCURACY_REPORT_DIR = "", tmp_path
    assert conf().archive_dir == tmp_path / "archive"
    settings.DELAY_ARCHIVE_DIR = str(tmp_path / "elsewhere")
    assert conf().archive_dir == tmp_path / "elsewhere"


def test_a_prune_batch_of_nothing_is_refused(settings):
    settings.DELAY_PRUNE_BATCH = 0
    with pytest.raises(ImproperlyConfigured, match="DELAY_PRUNE_BATCH must be at least 1, not 0"):
        conf()


def test_override_settings_reaches_the_typed_object(settings):
    settings.DELAY_BULK_MAX = 3
    assert conf().bulk_max == 3
    settings.DELAY_BULK_MAX = 4
    assert conf().bulk_max == 4
