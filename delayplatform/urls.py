from django.contrib import admin
from django.urls import include, path

from scheduling.health_views import healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),  # answered first by HealthCheckMiddleware
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/", include("scheduling.api.urls")),
    path("api-auth/", include("rest_framework.urls")),  # log in for the browsable API
]
