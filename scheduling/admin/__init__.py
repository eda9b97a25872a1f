"""The Django admin is the operators' control room. One module per area; each registers its
ModelAdmins on import. Admin classes call services and selectors only (no business logic)."""

from django.conf import settings
from django.contrib import admin

from scheduling.admin import (  # noqa: F401  (registers the admins)
    audit,
    dashboard,
    dead_letters,
    endpoints,
    events,
    messages,
    notifications,
    orphans,
    reports,
    schedules,
    teams,
    topology,
)
from scheduling.admin.base import declared_lookups_only

# The product's name and version where Django's default says "Django administration": on every
# page, so an operator rolling a release out sees which one answers.
admin.site.site_header = f"Delay platform {settings.PLATFORM_VERSION}"
admin.site.site_title = "Delay platform admin"
admin.site.index_title = "Schedules, endpoints and delivery"

# Admins of the apps before this one (auth, axes) are registered by now (autodiscover imports in
# INSTALLED_APPS order, this app last): their changelists, too, accept only their declared filters.
declared_lookups_only(site=admin.site)
