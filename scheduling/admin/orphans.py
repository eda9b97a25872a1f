"""Orphan copies: copies the broker handed over that name no row (after a restore from backup,
the messages scheduled after the backup), set aside by the workers for the operator to decide on
(docs/operations/backup-and-restore.md). Read-only, what the copy carried as it came; operators
delete the ones decided on (Django's delete, with its confirmation page, through the service that
audits each copy), a team's members only read their team's."""

from django.contrib import admin

from scheduling.admin.base import ControlRoomAdmin, EndpointListFilter, TeamListFilter
from scheduling.core.roles import Action
from scheduling.delivery.orphans import orphan_copy_delete
from scheduling.models import OrphanCopy


@admin.register(OrphanCopy)
class OrphanCopyAdmin(ControlRoomAdmin):
    list_display = ("message_id", "team", "endpoint", "queue", "due_at", "task", "first_seen_at", "times_seen")
    list_filter = (TeamListFilter, EndpointListFilter)
    search_fields = ("=message_id", "=queue")
    list_select_related = ("team", "endpoint")
    list_per_page = 50
    show_full_result_count = False
    fields = ("message_id", "attempt", "queue", "team", "endpoint", "due_at", "published_at", "version", "task",
              "headers", "body", "first_seen_at", "last_seen_at", "times_seen", "received_by")
    readonly_fields = fields
    team_actions = {"view": Action.READ, "add": None, "change": None, "delete": None}  # delete: operators

    def has_delete_permission(self, request, obj=None):
        return self.may(request, "delete", obj)

    def delete_model(self, request, obj):
        orphan_copy_delete(ids=[obj.pk])

    def delete_queryset(self, request, queryset):
        orphan_copy_delete(ids=list(queryset.values_list("pk", flat=True)))
