"""Subscriptions and events (issue 48): a team's subscriptions (topic pattern, endpoint, filter),
deleted through the service that audits it; its events, each page listing the messages it made
(each linked to its own page) and a button that cancels those still waiting."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import conditional_escape, format_html

from scheduling.admin import html
from scheduling.admin.base import ControlRoomAdmin, TeamListFilter
from scheduling.core.roles import Action
from scheduling.events.selectors import event_list, event_list_messages, subscription_list
from scheduling.events.services import event_cancel, subscription_delete
from scheduling.models import Event, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(ControlRoomAdmin):
    list_display = ("topic", "team", "endpoint", "filter_shown", "created")
    list_filter = (TeamListFilter,)
    search_fields = ("topic", "endpoint__name")
    list_per_page = 50
    show_full_result_count = False
    fields = ("id", "team", "topic", "endpoint", "filter_shown", "created")
    readonly_fields = fields
    team_actions = {"view": Action.READ, "add": None, "change": None, "delete": Action.ENDPOINTS}

    created = html.moment_column("created_at", "created at")

    def base_queryset(self, request):
        return subscription_list()

    @admin.display(description="filter")
    def filter_shown(self, subscription):
        return html.pretty_json(subscription.filter) if subscription.filter else "every event"

    def has_add_permission(self, request):
        return False  # the API's POST /api/subscriptions/ (or the client's): the endpoint and filter as JSON

    def has_delete_permission(self, request, obj=None):
        return self.may(request, "delete", obj)

    def delete_model(self, request, obj):
        subscription_delete(subscription=obj)

    def delete_queryset(self, request, queryset):
        for subscription in self.acting_on(request, queryset, Action.ENDPOINTS):
            subscription_delete(subscription=subscription)


@admin.register(Event)
class EventAdmin(ControlRoomAdmin):
    list_display = ("id", "topic", "team", "due", "message_count", "created")  # uuid7: a prefix is a time, not an id
    list_filter = (TeamListFilter,)
    search_fields = ("=id", "topic", "=idempotency_key")
    search_help_text = "An event id or an idempotency key (exact), or a part of its topic."
    list_per_page = 50
    show_full_result_count = False
    fields = ("id", "team", "topic", "due", "idempotency_key", "created", "message_count", "messages_table",
              "payload_json")
    readonly_fields = fields
    team_actions = {"view": Action.READ, "add": None, "change": None, "cancel": Action.CANCEL}
    actions = ("cancel",)
    object_actions = {"cancel": "Cancel its waiting messages"}
    MESSAGES_SHOWN = 1000  # a team's whole fan-out at the default DELAY_TEAM_MAX_SUBSCRIPTIONS

    created = html.moment_column("created_at", "created at")
    due = html.moment_column("due_at", "due at")

    def base_queryset(self, request):
        return event_list()

    @admin.display(description="payload")
    def payload_json(self, event):
        return html.pretty_json(event.payload)

    @admin.display(description="its messages")
    def messages_table(self, event):
        """One row per message the event made, linked to the message's page."""
        messages = event_list_messages(event_id=event.pk)[:self.MESSAGES_SHOWN]
        if not messages:
            return "none: no subscription matched"
        rows = [(format_html('<a href="{}">{}</a>', reverse("admin:scheduling_scheduledmessage_change", args=[m.pk]),
                             m.pk), m.endpoint.name, html.status_badge(m.status), html.moment(m.due_at))
                for m in messages]
        return html.table(("message", "endpoint", "status", "due at (UTC)"), rows, css_class="dp-table dp-event-messages",
                          cell=conditional_escape)

    def has_cancel_permission(self, request):
        return self.may(request, "cancel")

    @admin.action(description="Cancel the waiting messages of the selected events", permissions=["cancel"])
    def cancel(self, request, queryset):
        caller = self.caller(request)
        self.run_each(request, self.acting_on(request, queryset, Action.CANCEL),
                      lambda event: event_cancel(event_id=event.pk, caller=caller), "Events cancelled")
