"""Entrypoint of docker-compose.yml's RabbitMQ nodes: writes the broker's users, from the
environment, into the definitions file the node imports on every boot (rabbitmq-definitions.conf),
then starts the node as the image does. A definitions file cannot read the environment, and one
with the passwords in it would be a secret in the repository.

Two users: an administrator for people (the management UI), and the platform's own, tagged
``monitoring`` (it reads queues, nodes and the overview; it never manages users or policies) with
every permission on vhost ``/`` and no other. Importing definitions at boot skips RabbitMQ's default
user and vhost, so guest never exists. Runs with the image's python3 (its rabbitmqadmin needs it)."""

import json
import os
import pwd
import sys

TARGET = "/etc/rabbitmq/definitions.json"
SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")  # as-is in a URL


def required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value or not SAFE.issuperset(value):
        sys.exit(f"{name} must be set, in letters, digits and -_.~ only (it goes into URLs as it is)")
    return value


def definitions() -> dict:
    admin, platform = required("ADMIN_USER"), required("PLATFORM_USER")
    if admin == platform:
        sys.exit("ADMIN_USER and PLATFORM_USER must differ: the platform is not the administrator")
    every = {"vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    return {
        "users": [{"name": admin, "password": required("ADMIN_PASSWORD"), "tags": ["administrator"]},
                  {"name": platform, "password": required("PLATFORM_PASSWORD"), "tags": ["monitoring"]}],
        "vhosts": [{"name": "/"}],
        "permissions": [{"user": admin, **every}, {"user": platform, **every}],
    }


def main():
    if os.environ.get("CLUSTER_NODE") and not os.environ.get("RABBITMQ_ERLANG_COOKIE"):
        sys.exit("RABBITMQ_ERLANG_COOKIE must be set for the cluster profile: the nodes share it, and it "
                 "gives full control of them (e.g. python3 -c 'import secrets; print(secrets.token_hex(32))')")
    text = json.dumps(definitions())
    fd = os.open(TARGET, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    if os.getuid() == 0:  # the image's entrypoint steps down to rabbitmq, which reads the file
        user = pwd.getpwnam("rabbitmq")
        os.chown(TARGET, user.pw_uid, user.pw_gid)
    os.execvp("docker-entrypoint.sh", ["docker-entrypoint.sh", "rabbitmq-server"])


if __name__ == "__main__":
    main()
