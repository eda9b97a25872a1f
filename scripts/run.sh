#!/usr/bin/env bash
# Start the platform in the foreground: a Celery worker (with beat) and the web server.
# Ctrl-C stops both. HOST/PORT choose the address (default 127.0.0.1:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p .run
"$BIN/celery" -A delayplatform worker --beat --schedule .run/celerybeat-schedule \
  --loglevel "${LOG_LEVEL:-INFO}" &
worker=$!
trap 'kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true' EXIT INT TERM
echo "web: http://${HOST:-127.0.0.1}:${PORT:-8000}/admin/  (create a login with: .venv/bin/python manage.py createsuperuser)"
echo "metrics: http://${HOST:-127.0.0.1}:${PORT:-8000}/metrics, worker http://127.0.0.1:${DELAY_WORKER_METRICS_PORT:-9808}/metrics"
# gunicorn.conf.py: /metrics sums every gunicorn worker process (docs/observability/metrics.md)
"$BIN/gunicorn" delayplatform.wsgi --config gunicorn.conf.py --bind "${HOST:-127.0.0.1}:${PORT:-8000}" \
  --workers "${WEB_WORKERS:-2}" --access-logfile -
