"""Notification routes (issue 48): which of a team's endpoints take which notification types.
Read-only here (made through the API or delayctl, which validate and audit); a team's admins
delete theirs through the service that audits it; members only read their team's."""

from django.contrib import admin

from scheduling.admin.base import ControlRoomAdmin, TeamListFilter
from scheduling.core.roles import Action
from scheduling.models import NotificationRoute
from scheduling.notifications.selectors import notification_route_list
from scheduling.notifications.services import notification_route_delete


@admin.register(NotificationRoute)
class NotificationRouteAdmin(ControlRoomAdmin):
    list_display = ("endpoint", "team", "types", "created_at")
    list_filter = (TeamListFilter,)
    list_select_related = ("team", "endpoint")
    list_per_page = 50
    show_full_result_count = False
    fields = ("id", "team", "endpoint", "events", "created_at")
    readonly_fields = fields
    team_actions = {"view": Action.READ, "add": None, "change": None, "delete": Action.ENDPOINTS}

    def base_queryset(self, request):
        return notification_route_list()

    @admin.display(description="notification types")
    def types(self, route):
        return ", ".join(route.events)

    def has_delete_permission(self, request, obj=None):
        return self.may(request, "delete", obj)

    def delete_model(self, request, obj):
        notification_route_delete(route=obj)

    def delete_queryset(self, request, queryset):
        for route in queryset.select_related("team", "endpoint"):
            notification_route_delete(route=route)
