#!/usr/bin/env bash
# RabbitMQ 4.0.5 beside the machine's own broker: Debian 13's package (on Erlang/OTP 27) in a
# Debian 13 root built once with debootstrap and cached, run in a chroot on ports of its own. The
# machine's RabbitMQ (its node, port 5672, epmd on 4369) is not touched: 4.x nodes register with an
# epmd of their own on port 4371.
#
#   scripts/rabbitmq4.sh root               # build the root (once; cached in RABBITMQ4_ROOT) and mount /proc in it
#   scripts/rabbitmq4.sh start              # start (or find running) a node: amqp 5690, management 15690
#   scripts/rabbitmq4.sh status             # the node's name, ports and whether it runs
#   scripts/rabbitmq4.sh urls               # the BROKER_URL and RABBITMQ_MANAGEMENT_URL to use
#   scripts/rabbitmq4.sh stop               # stop it and remove its data
#   scripts/rabbitmq4.sh run CMD [ARGS...]  # a command in the root (rabbitmqctl, rabbitmq-server, ...),
#                                           # with the RABBITMQ_* variables of the environment
#
# Settings (environment): RABBITMQ4_ROOT (/var/cache/dp/rabbitmq4-root), RABBITMQ4_PORT (5690:
# management on +10000, Erlang distribution on +20000), RABBITMQ4_NAME (dp4: node dp4@localhost),
# RABBITMQ4_MIRROR (http://deb.debian.org/debian).
set -euo pipefail

ROOT=${RABBITMQ4_ROOT:-/var/cache/dp/rabbitmq4-root}
PORT=${RABBITMQ4_PORT:-5690}
NAME=${RABBITMQ4_NAME:-dp4}
MIRROR=${RABBITMQ4_MIRROR:-http://deb.debian.org/debian}
EPMD_PORT=4371
NODE="$NAME@localhost"
DATA="/tmp/$NAME"  # inside the root

say() { echo "rabbitmq4: $*"; }

wait_for() {  # wait_for SECONDS COMMAND...
  local seconds=$1; shift
  for _ in $(seq 1 "$seconds"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  "$@"
}

root() {
  if [ ! -x "$ROOT/usr/sbin/rabbitmq-server" ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "rabbitmq4: building $ROOT needs root (debootstrap and chroot)" >&2
      exit 1
    fi
    command -v debootstrap >/dev/null || {
      say "installing debootstrap from Debian packages"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    say "building a Debian 13 root with rabbitmq-server in $ROOT (once, about a minute)"
    rm -rf "$ROOT.partial"
    mkdir -p "$(dirname "$ROOT")"
    debootstrap --variant=minbase --include=rabbitmq-server trixie "$ROOT.partial" "$MIRROR" >/dev/null
    mv "$ROOT.partial" "$ROOT"
  fi
  # RabbitMQ reads its memory use from /proc (vm_memory_monitor): the root needs one
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
}

run() {  # run CMD [ARGS...] in the root, as root, with the environment's RABBITMQ_* variables
  local vars=()
  while IFS='=' read -r key value; do
    vars+=("$key=$value")
  done < <(env | grep -E '^RABBITMQ_' || true)
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8 ERL_EPMD_PORT=$EPMD_PORT \
    "${vars[@]}" chroot "$ROOT" "$@"
}

node_env() {
  export RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_PORT="$PORT" RABBITMQ_DIST_PORT=$((PORT + 20000)) \
    RABBITMQ_CONFIG_FILE="$DATA/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$DATA/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$DATA/enabled_plugins" RABBITMQ_MNESIA_BASE="$DATA/mnesia" \
    RABBITMQ_LOG_BASE="$DATA/log" RABBITMQ_PID_FILE="$DATA/pid"
}

running() { [ -x "$ROOT/usr/sbin/rabbitmqctl" ] && timeout 20 "$0" run rabbitmqctl -q -n "$NODE" status >/dev/null 2>&1; }

start() {
  root
  if running; then say "$NODE is running"; urls; return; fi
  mkdir -p "$ROOT$DATA"
  cat >"$ROOT$DATA/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $((PORT + 10000))
loopback_users = none
EOF
  echo "[rabbitmq_management]." >"$ROOT$DATA/enabled_plugins"
  # as the cluster and the tests' nodes: unconfirmed dead-letters re-sent after 5 s, not 180 s
  echo "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}]." >"$ROOT$DATA/advanced.config"
  run chown -R rabbitmq:rabbitmq "$DATA"
  say "starting $NODE (RabbitMQ 4.0.5 in $ROOT: amqp $PORT, management $((PORT + 10000)))"
  node_env
  run rabbitmq-server -detached
  if ! wait_for 120 running; then
    say "$NODE did not answer within 120 s; the end of its log:" >&2
    tail -n 30 "$ROOT$DATA"/log/*.log >&2 2>/dev/null || true
    exit 1
  fi
  run rabbitmqctl -q -n "$NODE" await_startup
  wait_for 60 curl -sf -u guest:guest "http://127.0.0.1:$((PORT + 10000))/api/overview"
  say "$NODE ready"
  urls
}

stop() {
  if running; then
    say "stopping $NODE"
    pid_file=()
    [ -f "$ROOT$DATA/pid" ] && pid_file=("$DATA/pid")
    timeout 60 "$0" run rabbitmqctl -q -n "$NODE" stop "${pid_file[@]}" || true
  fi
  pid=$(cat "$ROOT$DATA/pid" 2>/dev/null) || true
  if [ -n "${pid:-}" ] && grep -qs beam "/proc/$pid/cmdline"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -rf "${ROOT:?}$DATA"
}

status() {
  printf '%s amqp %s management %s %s\n' "$NODE" "$PORT" "$((PORT + 10000))" "$(running && echo running || echo stopped)"
}

urls() {
  echo "BROKER_URL='amqp://guest:guest@127.0.0.1:$PORT/'"
  echo "RABBITMQ_MANAGEMENT_URL='http://guest:guest@127.0.0.1:$((PORT + 10000))'"
}

case "${1:-start}" in
  root|start|stop|status|urls) "${1:-start}" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 root|start|stop|status|urls|run CMD..." >&2; exit 2 ;;
esac
