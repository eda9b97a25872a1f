"""Orphan copies: copies the broker handed over that name no row (after a restore from backup,
the messages scheduled after the backup), set aside by the workers for the operator to decide on
(docs/operations/backup-and-restore.md). Read-only: what the copy carried, as it came."""

from django.contrib import admin

from scheduling.models import OrphanCopy
from scheduling.admin.base import ControlRoomAdmin, EndpointListFilter, TeamListFilter


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
