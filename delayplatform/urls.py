from django.contrib import admin
from django.urls import include, path

from scheduling.probes.health_views import healthz, readyz
from scheduling.probes.metrics_http import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),  # answered first by HealthCheckMiddleware
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus; who may read it: docs/observability/metrics.md
    path("admin/", admin.site.urls),
    path("api/", include("scheduling.api.urls")),
    path("api-auth/", include("rest_framework.urls")),  # log in for the browsable API
]
