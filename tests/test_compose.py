"""docker-compose.yml and the image run the production settings and expose nothing but to this host:
RabbitMQ's 5672 and 15672 were published on every interface with an administrator login that the
platform itself used, its password a literal default, and the image ran without DELAY_PRODUCTION."""

import importlib.util
import os
import re
import shutil
import subprocess

import pytest
import yaml

from harness.paths import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PLATFORM = {name for name, service in SERVICES.items() if "build" in service}  # the image built from Dockerfile
SECRET_NAME = re.compile(r"PASS|SECRET|COOKIE|TOKEN|KEY")
REFERENCE = re.compile(r"\$\{[A-Z0-9_]+(?::\?[^}]*|:-)?\}")  # a variable, required or empty: no literal default
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


def test_the_image_runs_the_production_settings():
    env_lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("ENV ")]
    assert any(re.search(r"\bDELAY_PRODUCTION=1\b", line) for line in env_lines)


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed here")
def test_docker_compose_reads_the_file_and_names_a_missing_secret():
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", (ROOT / "docker-compose.yml").read_text()))
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
