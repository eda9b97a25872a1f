"""The dead letters (failed and expired messages with their last error) and the bulk actions' progress.

"Republish selected" runs at once on the rows ticked. "Republish all matching" takes the list's
filters (endpoint, schedule, when it was due: the bulk action's own) and runs in a worker batch by
batch: the Bulk actions page shows how far it got."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from scheduling.admin.base import OPERATOR_ERRORS, ControlRoomAdmin, EndpointListFilter, TeamListFilter
from scheduling.admin.messages import ScheduleFilter
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.messages.bulk import message_enqueue_matching, message_start_matching
from scheduling.messages.selectors import message_search
from scheduling.messages.services import message_republish
from scheduling.models import BulkAction, Endpoint, FailedMessage
from scheduling.teams.selectors import queryset_for_caller, team_pick


class DueWithinFilter(admin.SimpleListFilter):
    """When the message was due: the bulk action's due_after, so "all matching" is this list."""

    title = "due"
    parameter_name = "due_within"
    WINDOWS = {"hour": ("in the last hour", timedelta(hours=1)), "day": ("in the last day", timedelta(days=1)),
               "week": ("in the last week", timedelta(days=7))}

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _) in self.WINDOWS.items()]

    def due_after(self):
        return timezone.now() - self.WINDOWS[self.value()][1] if self.value() in self.WINDOWS else None

    def queryset(self, request, queryset):
        after = self.due_after()
        return queryset if after is None else queryset.filter(due_at__gt=after)


# The dead letters: messages that ended without being handled -- failed (republishable) and expired
# (past their expires_at: final, never retried nor republished).
DEAD = (Status.FAILED, Status.EXPIRED)


class DeadStatusFilter(admin.SimpleListFilter):
    """Failed or expired: only the failed can be republished."""

    title = "status"
    parameter_name = "dead_status"

    def lookups(self, request, model_admin):
        return [(status.value, status.value) for status in DEAD]

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() in {s.value for s in DEAD} else queryset


@admin.register(FailedMessage)
class DeadLetterAdmin(ControlRoomAdmin):
    list_display = ("short_id", "team", "endpoint", "schedule", "status", "due_at", "expires_at", "finished_at",
                    "attempts", "error")
    list_filter = (DeadStatusFilter, EndpointListFilter, ScheduleFilter, DueWithinFilter)
    team_actions = {"view": Action.READ, "add": None, "change": None, "republish": Action.CANCEL}
    search_fields = ("=id", "=idempotency_key")
    list_per_page = 50
    show_full_result_count = False
    actions = ("republish_selected", "republish_all_matching")
    fields = ("id", "endpoint", "topology", "schedule", "status", "due_at", "expires_at", "created_at", "finished_at",
              "attempts", "delivery_count", "last_error", "payload")
    readonly_fields = fields

    def base_queryset(self, request):
        return FailedMessage.objects.filter(status__in=DEAD).select_related("endpoint__team", "topology")

    def team_id_of(self, obj):
        return obj.endpoint.team_id

    @admin.display(description="team")
    def team(self, message):
        return message.endpoint.team.name

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        return (message_search(queryset=queryset, term=term) if term else queryset), False

    def has_add_permission(self, request):
        return False

    def has_republish_permission(self, request):
        return self.may(request, "republish")

    @admin.display(description="id")
    def short_id(self, message):
        url = reverse("admin:scheduling_scheduledmessage_change", args=[message.pk])
        return format_html('<a href="{}">{}</a>', url, str(message.pk)[:8])

    @admin.display(description="last error")
    def error(self, message):
        text = message.last_error or ""
        return format_html('<span title="{}">{}</span>', text, text[:120] + ("…" if len(text) > 120 else ""))

    @admin.action(description="Republish selected failed messages", permissions=["republish"])
    def republish_selected(self, request, queryset):
        caller = self.caller(request)
        queryset = queryset.filter(status=Status.FAILED)  # an expired message is never sent again
        self.run_each(request, queryset.values_list("pk", flat=True)[:1000],
                      lambda pk: message_republish(message_id=pk, caller=caller), "Republished")

    @admin.action(description="Republish all failed messages matching the filters (in a worker, with progress)",
                  permissions=["republish"])
    def republish_all_matching(self, request, queryset):
        filters = {"status": Status.FAILED, "schedule": request.GET.get("schedule"),
                   "due_after": DueWithinFilter(request, request.GET.copy(), FailedMessage, self).due_after()}
        caller = self.caller(request)
        endpoint_id = request.GET.get("endpoint__id__exact")
        endpoint = None
        if endpoint_id and endpoint_id.isdigit():
            endpoint = queryset_for_caller(queryset=Endpoint.objects.select_related("team"), caller=caller,
                                           action=Action.CANCEL).filter(pk=endpoint_id).first()
            if endpoint is None:
                self.message_user(request, "that endpoint is not one whose messages you may republish", messages.ERROR)
                return None
            filters["endpoint"] = endpoint.name
        try:
            # the endpoint's team, else the one team the user may republish in (an operator: every team)
            team = endpoint.team if endpoint else (None if caller.operator else team_pick(caller=caller,
                                                                                        action=Action.CANCEL))
            action = message_start_matching(kind=BulkAction.Kind.REPUBLISH, filters=filters,
                                            requested_by=request.user.get_username(), team=team)
        except ValidationError as exc:
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)
            return None
        except OPERATOR_ERRORS as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        message_enqueue_matching(action=action)
        self.message_user(request, f"Republishing {action.matched:,} failed message(s) in a worker: see Bulk actions",
                          messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scheduling_bulkaction_changelist"))


@admin.register(BulkAction)
class BulkActionAdmin(ControlRoomAdmin):
    list_display = ("created_at", "kind", "team", "filters", "progress", "refused", "state", "requested_by",
                    "finished_at", "error")
    list_filter = ("kind", "state", TeamListFilter)
    fields = ("kind", "team", "filters", "matched", "done", "refused", "state", "requested_by", "error",
              "created_at", "finished_at")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    @admin.display(description="progress")
    def progress(self, action):
        share = 100 if not action.matched else min(100, round(100 * action.done / action.matched))
        return format_html('<progress max="100" value="{}"></progress> {} / {}', share, f"{action.done:,}",
                           f"{action.matched:,}")
