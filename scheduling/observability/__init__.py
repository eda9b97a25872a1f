"""Observability's sink, low in the order so that every layer may write to it: the Prometheus
metrics (every definition in metrics.py and webhook_metrics.py; who may read them, metrics_access.py;
the multi-process directory, metrics_dir.py), the team, endpoint and version names their labels and
log lines use (label_names.py) and the traces (tracing.py). What reads the platform to show it
(/healthz, /readyz, the figures of /metrics and its servers) is probes/, above the domains."""

# Import-light on purpose: gunicorn.conf.py imports metrics_dir and settings.py metrics_access
# before Django is set up, which imports this package first.
