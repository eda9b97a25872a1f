"""docker-compose.yml and the image run the production settings and expose nothing but to this host:
RabbitMQ's 5672 and 15672 were published on every interface with an administrator login that the
platform itself used, its password a literal default, and the image ran without DELAY_PRODUCTION."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from harness.paths import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PLATFORM = {name for name, service in SERVICES.items() if "build" in service}  # the image built from Dockerfile
SECRET_NAME = re.compile(r"PASS|SECRET|COOKIE|TOKEN|KEY")
REFERENCE = re.compile(r"\$\{[A-Z0-9_]+(?::?\?[^}]*|:-)?\}")  # a variable, required or empty: no literal default
URL_PASSWORD = re.compile(r"://[^/:@\s]+:([^@\s]*)@")


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def test_the_platform_services_are_the_app_image():
    assert PLATFORM == {"web", "worker", "beat"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_published_port_is_bound_to_this_host_only(name):
    for port in SERVICES[name].get("ports", []):
        if isinstance(port, dict):  # the long syntax
            assert port.get("host_ip") == "127.0.0.1", port
        else:
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port!r} is published on every interface"


@pytest.mark.parametrize("name", sorted(PLATFORM))
def test_every_platform_service_runs_the_production_settings(name):
    env = environment(SERVICES[name])
    assert env.get("DELAY_PRODUCTION") == "1" and env.get("DEBUG", "0") == "0"
    assert env["SECRET_KEY"].startswith("${SECRET_KEY:?"), "required, from the environment or .env"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_no_password_is_written_in_the_file(name):
    for key, value in environment(SERVICES[name]).items():
        if REFERENCE.fullmatch(value):  # all of it from the environment (a required one's message is text)
            continue
        assert not SECRET_NAME.search(key), f"{name}: {key}={value!r}"
        for password in URL_PASSWORD.findall(value):
            assert REFERENCE.fullmatch(password), f"{name}: {key} has a password in it: {value!r}"


def test_the_platform_is_not_the_brokers_administrator():
    """The broker's users are made from the environment at the node's start; the platform's is
    tagged monitoring, with permissions on vhost / only, and is the user the platform's URLs name."""
    spec = importlib.util.spec_from_file_location("rabbitmq_definitions", ROOT / "docker" / "rabbitmq-definitions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rabbit = environment(SERVICES["rabbitmq"])
    env = {"ADMIN_USER": "admin", "ADMIN_PASSWORD": "a-1", "PLATFORM_USER": rabbit["PLATFORM_USER"],
           "PLATFORM_PASSWORD": "p-2"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        definitions = module.definitions()
    tags = {user["name"]: user["tags"] for user in definitions["users"]}
    assert tags == {"admin": ["administrator"], "delayplatform": ["monitoring"]}
    assert {(p["user"], p["vhost"]) for p in definitions["permissions"]} == {("admin", "/"), ("delayplatform", "/")}
    for name in PLATFORM:
        for key in ("BROKER_URL", "RABBITMQ_MANAGEMENT_URL"):
            assert "delayplatform:RABBITMQ_PASSWORD@" in environment(SERVICES[name])[key]  # the hint names it
    conf = (ROOT / "docker" / "rabbitmq-definitions.conf").read_text()
    assert f"load_definitions = {module.TARGET}" in conf


SHARED_WITH_MAKE_RUN = {"SECRET_KEY", "DELAY_SECRETS_KEYS", "DELAY_METRICS_TOKEN", "LOG_FORMAT"}


def test_the_compose_file_reads_no_setting_of_make_run_but_the_shared_ones():
    """make run and manage.py read the same .env (docs/operations/containers.md): a variable the
    compose file took under a setting's own name (ALLOWED_HOSTS=delay.example.com, a BROKER_URL at
    host rabbitmq) would move them too. The containers' own settings have CONTAINER_* names."""
    from scheduling.config.specs import BY_ENV

    read = set(re.findall(r"\$\{([A-Z0-9_]+)", (ROOT / "docker-compose.yml").read_text()))
    assert read & BY_ENV.keys() == SHARED_WITH_MAKE_RUN
    given = {key for name in PLATFORM for key in environment(SERVICES[name])}
    assert {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "DELAY_TLS_PROXY_HEADER", "BROKER_URL"} <= given


def test_the_published_ports_default_to_make_run_s_and_move_by_variable():
    """Both on one host: compose's ports are make run's unless .env moves them."""
    ports = {name: SERVICES[name].get("ports", []) for name in ("web", "rabbitmq")}
    assert ports == {"web": ["127.0.0.1:${CONTAINER_WEB_PORT:-8000}:8000"],
                     "rabbitmq": ["127.0.0.1:${CONTAINER_RABBITMQ_PORT:-5672}:5672",
                                  "127.0.0.1:${CONTAINER_RABBITMQ_MANAGEMENT_PORT:-15672}:15672"]}


def test_the_image_runs_the_production_settings():
    env_lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("ENV ")]
    assert any(re.search(r"\bDELAY_PRODUCTION=1\b", line) for line in env_lines)


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed here")
def test_docker_compose_reads_the_file_and_names_a_missing_secret():
    required = set(re.findall(r"\$\{([A-Z0-9_]+):?\?", (ROOT / "docker-compose.yml").read_text()))
    assert {"SECRET_KEY", "POSTGRES_PASSWORD", "RABBITMQ_ADMIN_PASSWORD", "RABBITMQ_PASSWORD"} <= required
    secrets = {name: f"value-of-{name.lower()}" for name in required}
    clean = {k: v for k, v in os.environ.items() if k not in secrets}

    def config(env, *args):
        return subprocess.run(["docker-compose", *args, "config", "-q"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    for args in ((), ("--profile", "cluster")):
        assert config({**clean, **secrets}, *args).returncode == 0
    missing = config({**clean, **secrets, "SECRET_KEY": ""})
    assert missing.returncode != 0 and "set SECRET_KEY" in missing.stderr


def bare_env(**extra: str) -> dict[str, str]:
    """Only what a shell needs: nothing of this process's environment reaches docker-compose or
    the settings but what the test gives."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **extra}


def make_env(folder) -> dict[str, str]:
    """scripts/make-env.sh run in ``folder`` (a copy of the repository's compose files), as a
    newcomer would: its .env's variables."""
    from dotenv import dotenv_values

    done = subprocess.run([str(folder / "scripts" / "make-env.sh")], env=bare_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return dotenv_values(folder / ".env")


def settings_read(env_file) -> dict:
    """What make run's settings (delayplatform.settings, not the tests') connect to and answer as with
    ``env_file`` as its .env."""
    import json

    code = ("import json, django; django.setup(); from django.conf import settings as s; "
            "d = s.DATABASES['default']; print(json.dumps([s.BROKER_URL, s.RABBITMQ_MANAGEMENT_URL, "
            "d['HOST'], d['PORT'], d['NAME'], d['USER'], s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, "
            "s.DELAY_TLS_PROXY_HEADER, s.SPARK_MASTER]))")
    env = bare_env(ENV_FILE=str(env_file), DJANGO_SETTINGS_MODULE="delayplatform.settings", SECRET_KEY="k" * 50)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed here")
def test_make_env_gives_compose_every_variable_and_leaves_make_run_as_it_was(tmp_path):
    """A newcomer's `scripts/make-env.sh && docker-compose up` needs nothing typed: the .env it
    writes holds every variable the compose file requires, the URLs repeat the platform's broker
    password, and make run's settings, which read the same .env, still connect where they did
    without it (not to a host named rabbitmq). Run again, it changes nothing."""
    shutil.copytree(ROOT / "docker", tmp_path / "docker")
    shutil.copy(ROOT / "docker-compose.yml", tmp_path)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "make-env.sh", tmp_path / "scripts")
    values = make_env(tmp_path)
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", (ROOT / "docker-compose.yml").read_text()))
    assert required <= {name for name, value in values.items() if value}, required - set(values)
    assert (tmp_path / ".env").stat().st_mode & 0o077 == 0, "secrets: the owner's only"

    def config(*args):
        return subprocess.run(["docker-compose", *args, "config"], cwd=tmp_path, env=bare_env(),
                              capture_output=True, text=True, timeout=60)

    for args in ((), ("--profile", "cluster")):
        done = config(*args)
        assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    password = services["rabbitmq"]["environment"]["PLATFORM_PASSWORD"]
    web = services["web"]["environment"]
    assert web["BROKER_URL"] == f"amqp://delayplatform:{password}@rabbitmq:5672//"
    assert web["RABBITMQ_MANAGEMENT_URL"] == f"http://delayplatform:{password}@rabbitmq:15672"
    assert f"delay:{services['postgres']['environment']['POSTGRES_PASSWORD']}@postgres:" in web["DATABASE_URL"]

    # with the host settings a real host sets by hand (the compose file's header), and the ports moved
    with open(tmp_path / ".env", "a") as env_file:
        env_file.write("CONTAINER_ALLOWED_HOSTS=delay.example.com\nCONTAINER_CSRF_TRUSTED_ORIGINS=https://delay.example.com\n"
                       "CONTAINER_TLS_PROXY_HEADER=X-Forwarded-Proto\nCONTAINER_WEB_PORT=8001\n")
    web = yaml.safe_load(config().stdout)["services"]["web"]
    assert web["environment"]["ALLOWED_HOSTS"] == "delay.example.com"
    assert web["environment"]["DELAY_TLS_PROXY_HEADER"] == "X-Forwarded-Proto"
    assert web["ports"] == ["127.0.0.1:8001:8000/tcp"]
    (tmp_path / "empty.env").write_text("")
    assert settings_read(tmp_path / ".env") == settings_read(tmp_path / "empty.env")
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                           env=bare_env(ENV_FILE=str(tmp_path / ".env")), timeout=120)
    assert check.returncode == 0, check.stderr

    from dotenv import dotenv_values

    before = (tmp_path / ".env").read_text()
    assert make_env(tmp_path) == dotenv_values(tmp_path / ".env") and (tmp_path / ".env").read_text() == before


def test_make_env_adds_only_what_an_older_env_lacks(tmp_path):
    """An .env from before (its last line without a newline) keeps its values: its secrets key
    must never change, and the URLs it gains name the broker password it has."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "make-env.sh", tmp_path / "scripts")
    (tmp_path / ".env").write_text("SECRET_KEY=kept\nDELAY_SECRETS_KEYS=also-kept\nALLOWED_HOSTS=delay.example.com\n"
                                   "DELAY_TLS_PROXY_HEADER=X-Forwarded-Proto\nRABBITMQ_PASSWORD='old-pw'")
    values = make_env(tmp_path)
    assert values["SECRET_KEY"] == "kept" and values["DELAY_SECRETS_KEYS"] == "also-kept"
    assert values["CONTAINER_BROKER_URL"] == "amqp://delayplatform:old-pw@rabbitmq:5672//"
    # the containers' host settings move to their own names; the old lines stay (make run reads them: named)
    assert (values["CONTAINER_ALLOWED_HOSTS"], values["CONTAINER_TLS_PROXY_HEADER"],
            values["CONTAINER_CSRF_TRUSTED_ORIGINS"]) == ("delay.example.com", "X-Forwarded-Proto", "")
    assert values["ALLOWED_HOSTS"] == "delay.example.com"
    again = subprocess.run([str(tmp_path / "scripts" / "make-env.sh")], env=bare_env(), capture_output=True,
                           text=True, timeout=60)
    assert "sets ALLOWED_HOSTS, which make run" in again.stderr and "sets DELAY_TLS_PROXY_HEADER" in again.stderr
    assert values["POSTGRES_PASSWORD"] and values["RABBITMQ_ADMIN_PASSWORD"] and values["DELAY_METRICS_TOKEN"]


def test_make_env_gives_no_secrets_key_to_an_env_whose_secrets_the_secret_key_seals(tmp_path):
    """Without DELAY_SECRETS_KEYS the platform seals webhook secrets with a key derived from
    SECRET_KEY (scheduling/security/secret_box.py): adding a key to such an .env would leave every
    stored secret unreadable. The script adds the rest, and says why not that one."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "make-env.sh", tmp_path / "scripts")
    (tmp_path / ".env").write_text("SECRET_KEY=kept\n")
    done = subprocess.run([str(tmp_path / "scripts" / "make-env.sh")], env=bare_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "DELAY_SECRETS_KEYS" in done.stderr, done.stderr
    from dotenv import dotenv_values

    values = dotenv_values(tmp_path / ".env")
    assert values["SECRET_KEY"] == "kept" and "DELAY_SECRETS_KEYS" not in values
    assert values["CONTAINER_BROKER_URL"].startswith(f"amqp://delayplatform:{values['RABBITMQ_PASSWORD']}@")
