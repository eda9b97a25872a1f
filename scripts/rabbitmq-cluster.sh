#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, from the machine's own rabbitmq-server: own
# node names, AMQP, management and distribution ports, and data under one directory. The
# machine's own RabbitMQ (rabbit@<host>, port 5672) is not touched.
#
#   scripts/rabbitmq-cluster.sh start    # start (or find running) and join the three nodes
#   scripts/rabbitmq-cluster.sh status   # one line per node: name, AMQP and management port, running
#   scripts/rabbitmq-cluster.sh urls     # the BROKER_URL and RABBITMQ_MANAGEMENT_URL to use
#   scripts/rabbitmq-cluster.sh stop     # stop the nodes and remove their data
#
# Settings (environment): CLUSTER_NODES (3), CLUSTER_PORT (5681: nodes on 5681, 5682, 5683;
# management on 15681…; Erlang distribution on 25681…), CLUSTER_DIR (/tmp/dp-rabbit-cluster),
# CLUSTER_NAME (dpc: nodes dpc1@localhost …), CLUSTER_SERIES (3: the machine's rabbitmq-server;
# 4: RabbitMQ 4.0.5 in its Debian 13 root, scripts/rabbitmq4.sh, the data inside the root).
set -euo pipefail

NODES=${CLUSTER_NODES:-3}
PORT=${CLUSTER_PORT:-5681}
DIR=${CLUSTER_DIR:-/tmp/dp-rabbit-cluster}
NAME=${CLUSTER_NAME:-dpc}
SERIES=${CLUSTER_SERIES:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$SERIES" = 4 ]; then
  R4_ROOT=${RABBITMQ4_ROOT:-/var/cache/dp/rabbitmq4-root}
  HOSTDIR="$R4_ROOT$DIR"  # the nodes' files as this script finds them; the nodes see $DIR
  rabbit() { "$HERE/rabbitmq4.sh" run "$@"; }
else
  HOSTDIR="$DIR"
  rabbit() { "$@"; }
fi

say() { echo "rabbitmq-cluster: $*"; }
node() { echo "${NAME}$1@localhost"; }
amqp_port() { echo $((PORT + $1 - 1)); }
mgmt_port() { echo $((PORT + 10000 + $1 - 1)); }
ctl() { local n=$1; shift; rabbit rabbitmqctl -q -n "$(node "$n")" "$@"; }

node_env() {  # the environment of node N: where it listens and keeps its data
  local n=$1 base="$DIR/$NAME$1"
  echo RABBITMQ_NODENAME="$(node "$n")" RABBITMQ_NODE_PORT="$(amqp_port "$n")" \
    RABBITMQ_DIST_PORT=$((PORT + 20000 + n - 1)) RABBITMQ_CONFIG_FILE="$base/rabbitmq" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$base/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins" RABBITMQ_MNESIA_BASE="$base/mnesia" \
    RABBITMQ_LOG_BASE="$base/log" RABBITMQ_PID_FILE="$base/pid"
}

# a node that stopped answering (a wedged cluster) counts as not running after 20 s: stop must end
running() { timeout 20 "$0" ctl "$1" status >/dev/null 2>&1; }

wait_for() {  # wait_for SECONDS COMMAND...
  local seconds=$1; shift
  for _ in $(seq 1 "$seconds"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  "$@"
}

start_node() {
  local n=$1 base="$HOSTDIR/$NAME$1"
  if running "$n"; then return; fi
  mkdir -p "$base"
  cat >"$base/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$(amqp_port "$n")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(mgmt_port "$n")
loopback_users = none
EOF
  echo "[rabbitmq_management]." >"$base/enabled_plugins"
  # A quorum queue dead-letters at-least-once: it keeps a message until the next queue confirms
  # it, and re-sends the unconfirmed ones after this timeout. When the next queue's leader dies,
  # its confirms never come, and with the default (180 s) a whole level waits three minutes
  # (docs/operations/reliability.md). 5 s: a node's death delays a level by seconds, not minutes.
  cat >"$base/advanced.config" <<EOF
[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].
EOF
  if [ "$SERIES" = 4 ]; then rabbit chown -R rabbitmq:rabbitmq "$DIR"
  else id rabbitmq >/dev/null 2>&1 && chown -R rabbitmq:rabbitmq "$DIR"; fi
  say "starting $(node "$n") (amqp $(amqp_port "$n"), management $(mgmt_port "$n"))"
  # A node that has not answered in two minutes is started once more (a start that died on boot
  # leaves nothing running); if it still does not answer, its log says why (a CI run once failed
  # here with nothing to read).
  for try in 1 2; do
    (export $(node_env "$n"); rabbit rabbitmq-server -detached) || true
    if wait_for 120 running "$n"; then ctl "$n" await_startup; return; fi
    say "$(node "$n") did not answer within 120 s (try $try of 2)" >&2
  done
  say "the end of $(node "$n")'s logs:" >&2
  tail -n 30 "$base"/log/*.log >&2 2>/dev/null || true
  ss -ltnp 2>/dev/null | grep -E ":($(amqp_port "$n")|$(mgmt_port "$n")|$((PORT + 20000 + n - 1))) " >&2 || true
  exit 1
}

joined() {  # is node N a running member of node 1's cluster?
  ctl 1 cluster_status --formatter json 2>/dev/null | grep -q "\"$(node "$1")\""
}

start() {
  if [ "$SERIES" = 4 ]; then "$HERE/rabbitmq4.sh" root
  else command -v rabbitmq-server >/dev/null || { echo "rabbitmq-cluster: rabbitmq-server is not installed (scripts/services.sh rabbitmq installs it)" >&2; exit 1; }; fi
  for n in $(seq 1 "$NODES"); do start_node "$n"; done
  for n in $(seq 2 "$NODES"); do
    if ! joined "$n"; then
      say "joining $(node "$n") to $(node 1)"
      ctl "$n" stop_app
      ctl "$n" reset >/dev/null
      ctl "$n" join_cluster "$(node 1)" >/dev/null 2>&1
      ctl "$n" start_app
      ctl "$n" await_startup
    fi
  done
  for n in $(seq 1 "$NODES"); do
    wait_for 60 curl -sf -u guest:guest "http://127.0.0.1:$(mgmt_port "$n")/api/overview"
  done
  say "cluster of $NODES nodes ready"
  urls
}

stop() {
  for n in $(seq "$NODES" -1 1); do
    if running "$n"; then say "stopping $(node "$n")"; timeout 60 "$0" ctl "$n" stop || true; fi
    pid=$(cat "$HOSTDIR/$NAME$n/pid" 2>/dev/null) || continue
    if grep -qs beam "/proc/$pid/cmdline"; then kill -9 "$pid" 2>/dev/null || true; fi  # one that did not stop
  done
  rm -rf "$HOSTDIR"
}

status() {
  for n in $(seq 1 "$NODES"); do
    printf '%s amqp %s management %s %s\n' "$(node "$n")" "$(amqp_port "$n")" "$(mgmt_port "$n")" \
      "$(running "$n" && echo running || echo stopped)"
  done
}

urls() {
  local amqp="" http=""
  for n in $(seq 1 "$NODES"); do
    amqp+="${amqp:+;}amqp://guest:guest@127.0.0.1:$(amqp_port "$n")/"
    http+="${http:+;}http://guest:guest@127.0.0.1:$(mgmt_port "$n")"
  done
  echo "BROKER_URL='$amqp'"
  echo "RABBITMQ_MANAGEMENT_URL='$http'"
}

case "${1:-start}" in
  start|stop|status|urls) "${1:-start}" ;;
  ctl) shift; ctl "$@" ;;  # ctl N ARGS...: rabbitmqctl on node N (in the root on series 4)
  cli) shift; rabbit "$@" ;;  # cli PROGRAM ARGS...: rabbitmq-queues, rabbitmq-diagnostics... of the nodes' series
  *) echo "usage: $0 start|stop|status|urls|ctl N ARGS...|cli PROGRAM ARGS..." >&2; exit 2 ;;
esac
