"""What tells how the platform is doing, read from the database and the broker: /healthz and
/readyz (health.py, health_views.py) and the figures the metrics show from them (metrics_figures.py).
Above the domains they read; the metrics themselves (observability/) are a sink every layer writes to."""
