"""Test settings: the normal settings, pointed at a database and a RabbitMQ vhost of this
test run's own, so runs never share state (two at once, or one after another)."""

import os
import uuid

# pytest-xdist's test processes inherit the run's id (and the environment this module set) from
# the process that started them; each adds its own name (gw0, gw1, ...) for a vhost of its own.
# pytest-django gives each its own database the same way (test_dp_<run>_gw0).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_BASE = os.environ.setdefault("DP_TEST_RUN_ID", uuid.uuid4().hex[:10]).removesuffix(f"-{_WORKER}")
RUN_ID = os.environ["DP_TEST_RUN_ID"] = f"{_BASE}-{_WORKER}" if _WORKER else _BASE
os.environ.setdefault("SECRET_KEY", "insecure-test-only-key")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
# One process: the machine's RabbitMQ. Under pytest-xdist, each test process has a RabbitMQ node of
# its own (started by tests/conftest.py on these ports): the machine's 3.10.8 node can stall for
# good when several test processes add vhosts and declare cascades on it at once, even one at a
# time under a lock (docs/reference/commands.md).
# A process these tests start (a worker, a command) inherits the variables below, or a BROKER_URL
# the test chose for it (a private node, an unreachable port): DP_TEST_NODE_OF says they are set.
if _WORKER and os.environ.get("DP_TEST_NODE_OF") != _WORKER:
    os.environ["DP_TEST_NODE_OF"] = _WORKER
    _PORT = 5710 + int(_WORKER.removeprefix("gw"))
    os.environ["BROKER_URL"] = f"amqp://guest:guest@127.0.0.1:{_PORT}/dp-test-{RUN_ID}"
    os.environ["RABBITMQ_MANAGEMENT_URL"] = f"http://guest:guest@127.0.0.1:{_PORT + 10000}"
    # harness.platform's throwaway platforms (the soak, the cluster's) take the same node
    os.environ["BENCH_AMQP"] = f"amqp://guest:guest@127.0.0.1:{_PORT}"
    os.environ["BENCH_MANAGEMENT"] = os.environ["RABBITMQ_MANAGEMENT_URL"]
os.environ.setdefault("BROKER_URL", f"amqp://guest:guest@127.0.0.1:5672/dp-test-{RUN_ID}")
# tests' webhook receivers listen on 127.0.0.1, and their celery_task endpoints run harness/testapp's tasks
os.environ.setdefault("DELAY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
os.environ.setdefault("DELAY_CELERY_TASK_ALLOWLIST", "testapp.*")
# tests and benchmarks post thousands of messages; tests/scheduling/api/test_throttles.py turns it on
os.environ.setdefault("DELAY_API_RATE", "off")
os.environ.setdefault("DELAY_TEAM_API_RATE", "off")
os.environ.setdefault("DELAY_KEY_API_RATE", "off")
# tests run schedules every second or two; tests/scheduling/teams sets a team's own quota
os.environ.setdefault("DELAY_TEAM_MIN_SCHEDULE_INTERVAL_SECONDS", "1")

from .settings import *  # noqa: E402,F401,F403
from .settings import DATABASES  # noqa: E402

# tests close connections between requests; benchmarks keep them, as production does
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("TEST_DB_CONN_MAX_AGE", "0"))
DATABASES["default"]["TEST"] = {"NAME": f"test_dp_{_BASE}"}  # pytest-xdist adds _gw0, _gw1, ...
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
from .settings import INSTALLED_APPS  # noqa: E402

INSTALLED_APPS = [*INSTALLED_APPS, "harness.testapp"]
from .settings import MIDDLEWARE  # noqa: E402

# Tests never run collectstatic; the live server serves static files itself.
MIDDLEWARE = [m for m in MIDDLEWARE if m != "whitenoise.middleware.WhiteNoiseMiddleware"]
