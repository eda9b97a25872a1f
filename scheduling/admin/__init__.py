"""The Django admin is the operators' control room. One module per area; each registers its
ModelAdmins on import. Admin classes call services and selectors only (no business logic)."""

from django.contrib import admin

from scheduling.admin.base import declared_lookups_only
from scheduling.admin import audit, dashboard, dead_letters, endpoints, messages, orphans, reports, schedules, teams, topology  # noqa: F401  (registers the admins)

# The product's name where Django's default says "Django administration".
admin.site.site_header = "Delay platform"
admin.site.site_title = "Delay platform admin"
admin.site.index_title = "Schedules, endpoints and delivery"

# Admins of the apps before this one (auth, axes) are registered by now (autodiscover imports in
# INSTALLED_APPS order, this app last): their changelists, too, accept only their declared filters.
declared_lookups_only(site=admin.site)
