#!/usr/bin/env bash
# Make sure the local services the platform needs are installed and running.
# Usage: scripts/services.sh rabbitmq [postgres] [postgres-statements] [platform-db] [chromium] [rabbitmq4] [rabbitmq4-root] [docker-compose] ...
# On a fresh Debian machine (as root) it installs what is missing from Debian's packages.
set -euo pipefail

say() { echo "services: $*"; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "services: $* missing and not root: install it with apt-get install -y $*" >&2
    exit 1
  fi
  say "installing $* from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$@" >/dev/null
}

wait_for() {  # wait_for SECONDS COMMAND...
  local seconds=$1; shift
  for _ in $(seq 1 "$seconds"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  "$@"
}

rabbitmq() {
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  if ! rabbitmqctl -q status >/dev/null 2>&1; then
    say "starting RabbitMQ"
    rabbitmq-server -detached
  fi
  wait_for 90 rabbitmqctl -q await_startup
  # The management API lists bindings and queue arguments (verify, admin) and hosts test vhosts.
  if ! rabbitmq-plugins -q is_enabled rabbitmq_management >/dev/null 2>&1; then
    say "enabling the RabbitMQ management plugin"
    rabbitmq-plugins -q enable rabbitmq_management >/dev/null
  fi
  wait_for 60 curl -sf -u guest:guest http://127.0.0.1:15672/api/overview
  say "RabbitMQ ready (amqp 127.0.0.1:5672, management 127.0.0.1:15672)"
}

postgres() {
  command -v pg_ctlcluster >/dev/null || apt_install postgresql
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if ! pg_isready -q -h 127.0.0.1; then
    say "starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
  wait_for 60 pg_isready -q -h 127.0.0.1
  # Tests connect over TCP as postgres/postgres; give the role that password where auth needs one.
  if ! PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -Atqc 'select 1' >/dev/null 2>&1; then
    say "setting the postgres role's password for local test connections"
    su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\""
  fi
  say "PostgreSQL ready (127.0.0.1:5432)"
}

postgres_statements() {
  # make bench counts statements per message (bench/pg_activity.py): pg_stat_statements must be
  # preloaded, which takes a restart of the server, done once (the setting stays)
  postgres
  if ! PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -Atqc 'SHOW shared_preload_libraries' | grep -q pg_stat_statements; then
    local version
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    say "preloading pg_stat_statements (restarting PostgreSQL $version once)"
    PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -Atqc \
      "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
    pg_ctlcluster --skip-systemctl-redirect "$version" main restart
    wait_for 60 pg_isready -q -h 127.0.0.1
  fi
  say "pg_stat_statements preloaded"
}

platform_db() {
  # make run's database: `delayplatform` on the local server, unless DATABASE_URL (environment
  # or .env) names another one, which is then yours to create.
  if [ -n "${DATABASE_URL:-}" ] || grep -qs '^DATABASE_URL=' .env; then
    say "DATABASE_URL is set: using that database as is"
    return
  fi
  if ! PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -Atqc \
      "SELECT 1 FROM pg_database WHERE datname = 'delayplatform'" | grep -q 1; then
    say "creating the database delayplatform"
    PGPASSWORD=postgres createdb -h 127.0.0.1 -U postgres delayplatform
  fi
  say "database delayplatform ready (postgres://postgres@127.0.0.1:5432/delayplatform)"
}

chromium() {
  command -v chromium >/dev/null && command -v chromedriver >/dev/null || apt_install chromium chromium-driver
  say "Chromium ready ($(command -v chromium))"
}

java_runtime() {  # the accuracy report's Spark job runs on a JVM (PySpark 4: Java 17 or newer)
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  say "Java ready ($(command -v java), $(java -version 2>&1 | head -n 1))"
}

python_venv() {
  python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
}

command -v curl >/dev/null || apt_install curl
for service in "$@"; do
  case "$service" in
    rabbitmq|postgres|chromium) "$service" ;;
    platform-db) platform_db ;;
    postgres-statements) postgres_statements ;;
    java) java_runtime ;;
    rabbitmq-cluster) command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
                      "$(dirname "$0")/rabbitmq-cluster.sh" start ;;
    rabbitmq4-root) "$(dirname "$0")/rabbitmq4.sh" root ;;  # RabbitMQ 4.0.5's Debian 13 root, built once
    rabbitmq4) "$(dirname "$0")/rabbitmq4.sh" start ;;  # a RabbitMQ 4.0.5 node: amqp 5690, management 15690
    python-venv) python_venv ;;
    # tests/test_compose.py reads docker-compose.yml with it (`config`: no Docker engine needed)
    docker-compose) command -v docker-compose >/dev/null || apt_install docker-compose ;;
    *) echo "services: unknown service $service" >&2; exit 2 ;;
  esac
done
