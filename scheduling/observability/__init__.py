"""Observability: the Prometheus metrics (every definition in metrics.py; who may read them,
metrics_access.py; the multi-process directory, metrics_dir.py; the figures read from the
database and the broker, metrics_figures.py; /metrics and the workers' port, metrics_http.py and
metrics_worker.py), /healthz and /readyz (health.py, health_views.py), the team, endpoint and
version names their labels and log lines use (label_names.py), and the lateness histogram of the
dashboard's per-minute figures (lateness_buckets.py)."""

# Import-light on purpose: gunicorn.conf.py imports metrics_dir and settings.py metrics_access
# before Django is set up, which imports this package first.
