"""Scheduled messages: the list operators watch, a detail page that shows how a message
travels and its attempts, cancel/republish/resend, and the form staff use to schedule one."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from scheduling.admin import dashboard, html
from scheduling.admin.base import ControlRoomAdmin, EndpointListFilter, request_caller
from scheduling.admin.forms import RescheduleForm, ScheduleMessageForm
from scheduling.admin.keyset import MessageChangeList
from scheduling.config.conf import conf
from scheduling.core.lifecycle import IN_FLIGHT, Status, scheduled_in_past
from scheduling.core.roles import Action
from scheduling.messages import wire
from scheduling.messages.selectors import (
    SCHEDULED_IN_PAST,
    message_list_attempts,
    message_list_waiting_for,
    message_search,
)
from scheduling.messages.services import (
    message_cancel,
    message_republish,
    message_reschedule,
    message_resend,
    message_schedule,
)
from scheduling.models import Endpoint, ScheduledMessage
from scheduling.retention.services import retention_describe
from scheduling.schedules.selectors import schedule_list
from scheduling.teams.selectors import queryset_for_caller
from topology import explain


class DueWindowFilter(admin.SimpleListFilter):
    """Due time relative to now (the date hierarchy covers calendar dates)."""

    title = "due"
    parameter_name = "due"
    WINDOWS = {
        "past-day": ("in the past day", timedelta(days=-1), timedelta(0)),
        "next-minute": ("in the next minute", timedelta(0), timedelta(minutes=1)),
        "next-hour": ("in the next hour", timedelta(0), timedelta(hours=1)),
        "next-day": ("in the next day", timedelta(0), timedelta(days=1)),
        "later": ("later than a day", timedelta(days=1), None),
    }

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _, _) in self.WINDOWS.items()]

    def queryset(self, request, queryset):
        if self.value() not in self.WINDOWS:
            return queryset
        _, start, end = self.WINDOWS[self.value()]
        now = timezone.now()
        queryset = queryset.filter(due_at__gte=now + start)
        return queryset if end is None else queryset.filter(due_at__lt=now + end)


class ScheduledInPastFilter(admin.SimpleListFilter):
    """Messages asked for a time before they were accepted (delivered at once; their lateness
    counts from when they were accepted)."""

    title = "scheduled in the past"
    parameter_name = "in_past"

    def lookups(self, request, model_admin):
        return [("yes", "yes"), ("no", "no")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(SCHEDULED_IN_PAST)
        if self.value() == "no":
            return queryset.exclude(SCHEDULED_IN_PAST)
        return queryset


class ScheduleFilter(admin.SimpleListFilter):
    """The runs of one recurring schedule (the schedules page links here); the choices list the
    first 50 schedules by key, any key works in the address."""

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request, model_admin):
        schedules = queryset_for_caller(queryset=schedule_list(), caller=request_caller(request))
        keys = list(dict.fromkeys(schedules.order_by("key").values_list("key", flat=True)[:100]))[:50]
        if self.value() and self.value() not in keys:
            keys.append(self.value())
        return [(key, key) for key in keys]

    def queryset(self, request, queryset):
        return queryset.filter(schedule=self.value()) if self.value() else queryset


@admin.register(ScheduledMessage)
class ScheduledMessageAdmin(ControlRoomAdmin):
    list_display = ("short_id", "team", "endpoint", "topology", "status_badge", "due", "delivered", "lateness",
                    "delivery_count")
    list_filter = ("status", DueWindowFilter, ScheduledInPastFilter, EndpointListFilter, "topology", ScheduleFilter)
    list_select_related = ("endpoint__team", "topology")
    team_actions = {"view": Action.READ, "add": Action.SCHEDULE, "change": None, "reschedule": Action.SCHEDULE,
                    "cancel": Action.CANCEL, "republish": Action.CANCEL, "resend": Action.CANCEL}
    date_hierarchy = "due_at"
    search_fields = ("=id", "=idempotency_key")
    search_help_text = "A message id or an idempotency key (exact)."
    list_per_page = 50
    show_full_result_count = False  # a second COUNT(*) over the whole table per page
    # With hundreds of millions of rows: pages by cursor, no exact count, no facet counts, and the
    # order is the index's (newest first, or by due time under a due filter): sorting by a
    # column meant sorting the table (keyset.MessageChangeList, docs/operations/performance.md "History").
    sortable_by = ()
    show_facets = admin.ShowFacets.NEVER
    actions = ("cancel", "republish", "resend")
    object_actions = {"cancel": "Cancel message", "republish": "Republish", "resend": "Resend"}
    ATTEMPTS_SHOWN = 100  # the newest of a message resent many times; the API pages through them all
    EXCERPT_SHOWN = 300  # characters of each answer in the table (the API gives the whole excerpt)
    fieldsets = (
        (None, {"fields": ("id", "endpoint", "topology", "status_badge", "idempotency_key", "schedule", "due_history",
                           "last_error", "event_link", "debounce", "flow_key", "ordering_key_shown",
                           "waiting_for")}),
        ("Timing (UTC)", {"fields": ("requested_delay", "created", "due", "expires", "published", "delivered",
                                     "cancelled", "lateness", "delivery_count", "attempts", "trigger",
                                     "delivered_by")}),
        ("Attempts", {"fields": ("attempts_table",)}),
        ("Notifications", {"fields": ("callbacks", "notification_type")}),
        ("Payload", {"fields": ("payload_json",)}),
        ("On the wire", {"fields": ("routing_key_used", "first_exchange_used", "headers_table", "path_table")}),
    )

    def get_readonly_fields(self, request, obj=None):
        return [field for _, options in self.fieldsets for field in options["fields"]]

    def base_queryset(self, request):
        return super().base_queryset(request).defer("payload")  # up to 256 KiB a row; lists never show it

    def team_id_of(self, obj):
        return obj.endpoint.team_id

    @admin.display(description="team")
    def team(self, message):
        return message.endpoint.team.name

    def has_change_permission(self, request, obj=None):
        return False  # messages change only through services: cancel, republish, reschedule

    def has_reschedule_permission(self, request, obj=None):
        return self.may(request, "reschedule", obj)  # what the API's PATCH needs

    def has_cancel_permission(self, request):
        return self.may(request, "cancel")

    def has_republish_permission(self, request):
        return self.may(request, "republish")

    def has_resend_permission(self, request):
        return self.may(request, "resend")

    def object_action_applies(self, obj, name):
        if name == "resend":  # a failed one has Republish; a Celery task is sent again by its sender
            return obj.status == Status.DELIVERED and obj.endpoint.handler != Endpoint.Handler.CELERY_QUEUE
        return obj.status in (IN_FLIGHT if name == "cancel" else {Status.FAILED})

    def get_changelist(self, request, **kwargs):
        return MessageChangeList

    def get_search_results(self, request, queryset, search_term):
        """Exact id or idempotency key; a term that is not a UUID only matches keys."""
        term = search_term.strip()
        return (message_search(queryset=queryset, term=term) if term else queryset), False

    # --- actions --------------------------------------------------------------------------

    @admin.action(description="Cancel selected messages (pending or published)", permissions=["cancel"])
    def cancel(self, request, queryset):
        caller = self.caller(request)
        self.run_each(request, queryset.values_list("pk", flat=True),
                      lambda pk: message_cancel(message_id=pk, caller=caller), "Cancelled")

    @admin.action(description="Republish selected failed messages", permissions=["republish"])
    def republish(self, request, queryset):
        caller = self.caller(request)
        self.run_each(request, queryset.values_list("pk", flat=True),
                      lambda pk: message_republish(message_id=pk, caller=caller), "Republished")

    @admin.action(description="Resend selected delivered messages (a new attempt, now)", permissions=["resend"])
    def resend(self, request, queryset):
        caller = self.caller(request)
        self.run_each(request, queryset.values_list("pk", flat=True),
                      lambda pk: message_resend(message_id=pk, caller=caller), "Resent")

    # --- the schedule form and the dashboard ---------------------------------------------

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)

        def form(data, initial):
            return ScheduleMessageForm(data, initial=initial, caller=caller)

        return self.service_form_view(
            request, form, lambda data: message_schedule(
                endpoint=data["endpoint"], payload=data["payload"], delay=data["delay_seconds"],
                deliver_at=data["deliver_at"], idempotency_key=data["idempotency_key"] or None, caller=caller,
                expires_at=data["expires_at"], expire_after_seconds=data["expire_after_seconds"],
                flow_key=data["flow_key"] or None,
            ),
            title="Schedule a message", initial={"endpoint": request.GET.get("endpoint")},
            field_map={"delay": "delay_seconds"}, done="Scheduled",
        )

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {"retention_window": retention_describe(), **(extra_context or {})})

    def reschedule_view(self, request, object_id):
        message = self.get_object(request, object_id)
        if message is None:
            raise Http404(f"no message {object_id}")
        if not self.has_reschedule_permission(request, message):
            raise PermissionDenied
        caller = self.caller(request)
        response = self.service_form_view(
            request, RescheduleForm, lambda data: message_reschedule(
                message_id=message.pk, delay=data["delay_seconds"], deliver_at=data["deliver_at"], caller=caller),
            title="Reschedule message", obj=message, field_map={"delay": "delay_seconds"}, done="Rescheduled")
        if isinstance(response, TemplateResponse):  # the form's Save: rows are read-only, this form is not
            response.context_data["has_change_permission"] = True
        return response

    def change_view(self, request, object_id, form_url="", extra_context=None):
        message = self.get_object(request, object_id)
        links = []
        if message is not None and message.status in IN_FLIGHT and self.has_reschedule_permission(request, message):
            links.append((reverse("admin:scheduling_scheduledmessage_reschedule", args=[message.pk]), "Reschedule"))
        return super().change_view(request, object_id, form_url, {"object_links": links, **(extra_context or {})})

    def get_urls(self):
        view = self.admin_site.admin_view(lambda request: dashboard.dashboard_view(self, request))
        reschedule = self.admin_site.admin_view(self.reschedule_view)
        return [path("dashboard/", view, name="scheduling_dashboard"),
                path("<path:object_id>/reschedule/", reschedule, name="scheduling_scheduledmessage_reschedule"),
                *super().get_urls()]

    # --- columns and read-only fields ----------------------------------------------------

    @admin.display(description="id", ordering="id")
    def short_id(self, message):
        return str(message.id)[:8]

    @admin.display(description="status", ordering="status")
    def status_badge(self, message):
        return html.status_badge(message.status)

    created = html.moment_column("created_at", "created at")

    @admin.display(description="due at", ordering="due_at")
    def due(self, message):
        """As requested; marked when that was before the message was accepted."""
        shown = html.moment(message.due_at)
        if not scheduled_in_past(message.due_at, message.created_at):
            return shown
        return format_html('{} <span class="dp-in-past" style="color:#8c6d31;font-weight:bold" title="due before '
                           'it was accepted: delivered at once; lateness counts from created at">'
                           'scheduled in the past</span>', shown)

    published = html.moment_column("published_at", "published at")
    delivered = html.moment_column("delivered_at", "delivered at")
    cancelled = html.moment_column("cancelled_at", "cancelled at")
    expires = html.moment_column("expires_at", "expires at (never handed over from then on)")

    @admin.display(description="lateness", ordering="lateness_ms")
    def lateness(self, message):
        return self.get_empty_value_display() if message.lateness_ms is None else f"{message.lateness_ms:,} ms"

    @admin.display(description="requested delay")
    def requested_delay(self, message):
        return explain.format_duration(message.requested_delay_ms)

    @admin.display(description="attempts made")
    def attempts_table(self, message):
        """Every handler attempt, oldest first (the newest ATTEMPTS_SHOWN of a message resent many
        times); the answer's start shortened and, like every cell, escaped: it is the receiver's text."""
        newest = list(message_list_attempts(message_id=message.pk).reverse()[:self.ATTEMPTS_SHOWN + 1])
        if not newest:
            return "none recorded yet"
        more = len(newest) > self.ATTEMPTS_SHOWN
        rows = [(a.number, a.trigger, html.moment(a.started_at), f"{a.duration_ms:,} ms", a.outcome,
                 a.status_code or "", a.worker, _shortened(a.excerpt, self.EXCERPT_SHOWN))
                for a in reversed(newest[:self.ATTEMPTS_SHOWN])]
        table = html.table(("#", "trigger", "started (UTC)", "duration", "outcome", "status", "worker", "answer"),
                           rows, css_class="dp-table dp-attempts")
        if more:
            return format_html("<p>the newest {} (older ones: GET /api/messages/{}/attempts/)</p>{}",
                               self.ATTEMPTS_SHOWN, message.pk, table)
        return table

    @admin.display(description="event")
    def event_link(self, message):
        """The event whose fan-out made it (issue 48), linked to its page."""
        if message.event_id is None:
            return self.get_empty_value_display()
        return format_html('<a href="{}">{}</a>', reverse("admin:scheduling_event_change", args=[message.event_id]),
                           message.event_id)

    @admin.display(description="callbacks")
    def callbacks(self, message):
        """Where its outcome record goes (docs/guides/notifications.md#callbacks)."""
        parts = [f"{label}: {endpoint.name}" for label, endpoint in (("on delivered", message.on_delivered),
                                                                      ("on failed", message.on_failed)) if endpoint]
        return "; ".join(parts) or "none"

    @admin.display(description="debounce")
    def debounce(self, message):
        """Its debounce key and window (docs/guides/scheduling.md#debounce); superseded: a newer message
        with the key replaced it (trailing) or it came within a leading window."""
        if message.debounce_key is None:
            return "none"
        if message.debounce_mode == "leading":
            rule = f"leading, a window of {message.debounce_seconds:,} s"
        else:
            rule = f"trailing, {message.debounce_seconds:,} s after the newest, at most {message.debounce_max_seconds:,} s"
        return f"key {message.debounce_key!r}: {rule}; window until {html.moment(message.debounce_until)}"

    @admin.display(description="ordering key")
    def ordering_key_shown(self, message):
        """Its ordering key (docs/guides/scheduling.md#ordering), and since when it waited for its turn."""
        if message.ordering_key is None:
            return "none"
        waited = f"; waited for its turn from {html.moment(message.waiting_since)}" if message.waiting_since else ""
        return f"{message.ordering_key!r}: one at a time, in due order, with the endpoint's others of this key{waited}"

    @admin.display(description="waiting for")
    def waiting_for(self, message):
        """A waiting message: the message of its key it waits for (message_list_waiting_for), linked
        to its page; the same endpoint's, so the viewer's team's."""
        if message.status != ScheduledMessage.Status.WAITING:
            return "not waiting"
        waited = message_list_waiting_for(messages=[message]).get(str(message.id))
        if waited is None:
            return "its turn has come: it is woken within seconds"
        return format_html('<a href="{}">{}</a>', reverse("admin:scheduling_scheduledmessage_change", args=[waited]),
                           waited)

    @admin.display(description="notification type")
    def notification_type(self, message):
        """The type a platform-made notification or callback message carries (it tells nothing itself)."""
        return message.notification or "not a notification"

    @admin.display(description="payload")
    def payload_json(self, message):
        return html.pretty_json(message.payload)

    @staticmethod
    def _wire(message) -> wire.Preview | str:
        """The publish rebuilt from the row, or why none can be (a row failed as unbuildable)."""
        try:
            return wire.preview(message, timezone.now(), margin_ms=conf().arrival_margin_ms)
        except wire.Unbuildable as exc:
            return str(exc)

    @staticmethod
    def _unbuildable(why: str):
        return format_html("no message can be built of it: {}", why)

    @admin.display(description="routing key")
    def routing_key_used(self, message):
        preview = None if message.routing_key else self._wire(message)
        if isinstance(preview, str):
            return self._unbuildable(preview)
        return message.routing_key or self._not_published(message, preview.routing_key)

    @admin.display(description="first exchange")
    def first_exchange_used(self, message):
        preview = None if message.first_exchange else self._wire(message)
        if isinstance(preview, str):
            return self._unbuildable(preview)
        return message.first_exchange or self._not_published(message, preview.exchange)

    @staticmethod
    def _not_published(message, value):
        return format_html("not published ({}); if published now: <code>{}</code>", message.status, value)

    @admin.display(description="headers")
    def headers_table(self, message):
        preview = self._wire(message)
        if isinstance(preview, str):
            return self._unbuildable(preview)
        return html.table(("header", "value"), sorted((k, repr(v)) for k, v in preview.headers.items()))

    @admin.display(description="path through the cascade")
    def path_table(self, message):
        preview = self._wire(message)
        if isinstance(preview, str):
            return self._unbuildable(preview)
        note = format_html(
            "<p>{} whole seconds in the cascade; the worker's timer holds the rest until the due time.</p>",
            f"{preview.delay_units:,}",
        )
        return note + html.table(explain.headers(message.topology.cascade), preview.path_rows, cell=html.markdown_cell)


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
