"""Recurring schedules: their rule and next run, their runs (the messages list, filtered),
create/edit through the upsert service, pause/resume and delete as actions."""

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from scheduling.admin.base import ControlRoomAdmin, EndpointListFilter, TeamListFilter
from scheduling.admin.forms import ScheduleForm
from scheduling.core.roles import Action
from scheduling.models import Schedule
from scheduling.schedules.selectors import schedule_list
from scheduling.schedules.services import schedule_delete, schedule_set_paused, schedule_upsert


@admin.register(Schedule)
class ScheduleAdmin(ControlRoomAdmin):
    list_display = ("key", "team", "endpoint", "rule_summary", "missed_runs", "is_paused", "next_run", "runs",
                    "runs_skipped", "runs_missed", "overlap", "runs_overlap_skipped")
    list_filter = ("is_paused", TeamListFilter, EndpointListFilter)
    team_actions = {"view": Action.READ, "add": Action.SCHEDULES, "change": Action.SCHEDULES,
                    "pause": Action.SCHEDULES, "remove": Action.SCHEDULES}
    search_fields = ("key",)
    list_per_page = 50
    actions = ("pause", "resume", "delete_schedules")
    object_actions = {"pause": "Pause", "resume": "Resume", "delete_schedules": "Delete"}
    fields = ("team", "key", "endpoint", "payload", "cron", "timezone", "interval_seconds", "start_at", "end_at",
              "missed_runs", "jitter_seconds", "catchup_seconds", "overlap", "is_paused", "revision", "next_run_at",
              "next_run_due", "last_run_at", "runs_skipped", "last_run_skipped_at", "runs_missed", "last_run_missed_at",
              "runs_overlap_skipped", "created_at", "updated_at")
    readonly_fields = fields

    def base_queryset(self, request):
        return schedule_list().select_related("team")

    @admin.display(description="rule")
    def rule_summary(self, schedule):
        if schedule.cron:
            return format_html("<code>{}</code> {}", schedule.cron, schedule.timezone)
        return f"every {schedule.interval_ms / 1000:g} s"

    @admin.display(description="next run (UTC)")
    def next_run(self, schedule):
        if schedule.is_paused:
            return "paused"
        runs = schedule.upcoming(timezone.now())
        return f"{runs[0]:%Y-%m-%d %H:%M:%S}" if runs else "none left"

    @admin.display(description="next run due (UTC)")
    def next_run_due(self, schedule):
        """The next run's due time: its time moved by the schedule's jitter (fixed per run)."""
        runs = schedule.upcoming(timezone.now())
        return f"{schedule.run_due_at(runs[0]):%Y-%m-%d %H:%M:%S.%f}"[:-3] if runs else "-"

    @admin.display(description="runs")
    def runs(self, schedule):
        url = reverse("admin:scheduling_scheduledmessage_changelist")
        return format_html('<a href="{}?schedule={}&endpoint__id__exact={}">runs</a>', url, schedule.key,
                           schedule.endpoint_id)

    def object_action_applies(self, obj, name):
        return name == "delete_schedules" or obj.is_paused == (name == "resume")

    @admin.action(description="Pause selected schedules (their runs made are cancelled)", permissions=["pause"])
    def pause(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.SCHEDULES),
                      lambda s: schedule_set_paused(key=s.key, team=s.team, paused=True), "Paused")

    @admin.action(description="Resume selected schedules", permissions=["pause"])
    def resume(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.SCHEDULES),
                      lambda s: schedule_set_paused(key=s.key, team=s.team, paused=False), "Resumed")

    @admin.action(description="Delete selected schedules (their runs to come are cancelled)",
                  permissions=["remove"])
    def delete_schedules(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.SCHEDULES),
                      lambda s: schedule_delete(key=s.key, team=s.team), "Deleted")

    def has_pause_permission(self, request):
        return self.may(request, "pause")

    def has_remove_permission(self, request):
        return self.may(request, "remove")

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)

        def form(data, initial):
            return ScheduleForm(data, initial=initial, caller=caller)

        return self.service_form_view(
            request, form, lambda data: schedule_upsert(**ScheduleForm.service_arguments(data))[0],
            title="Add schedule", done="Saved")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_change_permission(request, obj):
            return super().change_view(request, object_id, form_url, extra_context)
        initial = {"key": obj.key, "endpoint": obj.endpoint_id, "payload": obj.payload, "cron": obj.cron,
                   "timezone": obj.timezone, "interval_seconds": obj.interval_seconds, "start_at": obj.start_at,
                   "end_at": obj.end_at, "missed_runs": obj.missed_runs, "jitter_seconds": obj.jitter_seconds,
                   "catchup_seconds": obj.catchup_seconds, "overlap": obj.overlap}
        upcoming = obj.upcoming(timezone.now(), count=5)
        caller = self.caller(request)

        def form(data, initial):
            return ScheduleForm(data, initial=initial, next_runs=upcoming, caller=caller)

        return self.service_form_view(
            request, form, lambda data: schedule_upsert(**{**ScheduleForm.service_arguments({**data, "key": obj.key}),
                                                    "team": obj.team})[0],
            title="Change schedule", obj=obj, initial=initial, done="Saved")
