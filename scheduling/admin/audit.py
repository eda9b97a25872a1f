"""The audit log, read-only: a team's admins see their teams' changes, operators everything."""

from django.contrib import admin
from django.utils.html import format_html

from scheduling.admin import html
from scheduling.admin.base import ControlRoomAdmin
from scheduling.core.roles import Action
from scheduling.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(ControlRoomAdmin):
    list_display = ("at", "actor", "team_name", "action", "object_type", "object_repr", "source", "ip")
    # no filter or calendar that lists the table's distinct values: each would read the whole log
    list_filter = ("source",)
    search_fields = ("=object_id", "=request_id", "=action", "=key_prefix")
    search_help_text = "An object's id, a request id, an action (endpoint.rotate_secret) or a key's prefix (exact)."
    list_per_page = 50
    show_full_result_count = False
    team_actions = {"view": Action.AUDIT, "add": None, "change": None}
    fields = ("at", "source", "actor", "user_id", "key_prefix", "team_name", "action", "object_type", "object_id",
              "object_repr", "changes", "extra_json", "ip", "user_agent", "request_id")
    readonly_fields = fields

    def get_queryset(self, request):
        teams = self.caller(request).team_ids(Action.AUDIT)
        rows = AuditEvent.objects.all()
        return rows if teams is None else rows.filter(team_id__in=teams)

    @admin.display(description="before → after")
    def changes(self, event):
        keys = sorted(set(event.before or {}) | set(event.after or {}))
        rows = [(key, repr((event.before or {}).get(key, "")), repr((event.after or {}).get(key, ""))) for key in keys]
        return html.table(("field", "before", "after"), rows) if rows else format_html("—")

    @admin.display(description="extra")
    def extra_json(self, event):
        return html.pretty_json(event.extra) if event.extra else "—"
