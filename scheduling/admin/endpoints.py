"""Endpoints: counts by status, create/edit through the services, activate/deactivate, and the
webhook health the delivery engine keeps: a banner for an endpoint the platform disabled, and
Enable to resume it."""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from scheduling.admin import html
from scheduling.admin.base import ControlRoomAdmin, TeamListFilter
from scheduling.admin.forms import EndpointChangeForm, EndpointCreateForm
from scheduling.core.lifecycle import Status
from scheduling.core.roles import Action
from scheduling.endpoints.selectors import endpoint_count_messages, endpoint_list
from scheduling.endpoints.services import (
    endpoint_create,
    endpoint_enable,
    endpoint_rotate_secret,
    endpoint_set_active,
    endpoint_update,
)
from scheduling.models import Endpoint, EndpointHealth
from scheduling.security.redaction import url_redacted
from scheduling.teams.selectors import team_pick


def _count_column(status: str):
    def column(self, endpoint):
        count = endpoint.message_counts[status]
        if not count:
            return 0
        url = reverse("admin:scheduling_scheduledmessage_changelist")
        title = "" if count.exact else " title=\"PostgreSQL's estimate\""
        return format_html('<a href="{}?endpoint__id__exact={}&status__exact={}"{}>{}</a>', url, endpoint.pk, status,
                           mark_safe(title), str(count))

    column.short_description = str(status)
    return column


@admin.register(Endpoint)
class EndpointAdmin(ControlRoomAdmin):
    list_display = ("name", "team", "queue", "topology", "handler_summary", "flow_summary", "is_active",
                    *(f"n_{s}" for s in Status))
    list_filter = (TeamListFilter, "is_active", "handler", "topology")
    team_actions = {"view": Action.READ, "add": Action.ENDPOINTS, "change": Action.ENDPOINTS}
    search_fields = ("name",)
    list_per_page = 50
    show_full_result_count = False  # a second COUNT(*) over the whole table per page
    actions = ("activate", "deactivate", "enable", "rotate_secret")
    object_actions = {"activate": "Activate", "deactivate": "Deactivate", "enable": "Enable",
                      "rotate_secret": "Rotate webhook secret"}
    fields = ("team", "name", "queue", "topology", "delivery_mode", "handler", "handler_target",
              "max_deliveries_per_second", "max_concurrent", "max_deliveries_per_second_per_key",
              "max_concurrent_per_key", "webhook_timeout_seconds", "is_active", "created_at", "updated_at")
    readonly_fields = fields

    n_pending = _count_column(Status.PENDING)
    n_published = _count_column(Status.PUBLISHED)
    n_delivered = _count_column(Status.DELIVERED)
    n_cancelled = _count_column(Status.CANCELLED)
    n_failed = _count_column(Status.FAILED)
    n_expired = _count_column(Status.EXPIRED)
    n_superseded = _count_column(Status.SUPERSEDED)
    n_waiting = _count_column(Status.WAITING)
    n_skipped = _count_column(Status.SKIPPED)

    @admin.display(description="handler", ordering="handler")
    def handler_summary(self, endpoint, *, redact: bool = False):
        if not endpoint.handler_target:
            return endpoint.handler
        target = url_redacted(endpoint.handler_target) if redact else endpoint.handler_target
        return format_html("{} <small>{}</small>", endpoint.handler, target)

    @admin.display(description="handler target")
    def handler_target_redacted(self, endpoint):
        return url_redacted(endpoint.handler_target)

    # Below a team's admin (who may change the endpoint), a webhook URL's query values and userinfo
    # are masked: they often carry the receiver's token (security/redaction.py).
    def get_list_display(self, request):
        caller = self.caller(request)

        def handler(endpoint):
            return self.handler_summary(endpoint, redact=not caller.may(Action.ENDPOINTS, endpoint.team_id))

        handler.short_description, handler.admin_order_field = "handler", "handler"
        return tuple(handler if name == "handler_summary" else name for name in super().get_list_display(request))

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and not self.caller(request).may(Action.ENDPOINTS, obj.team_id):
            return tuple("handler_target_redacted" if name == "handler_target" else name for name in fields)
        return fields

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    @admin.display(description="flow control")
    def flow_summary(self, endpoint):
        limits = [f"{endpoint.max_deliveries_per_second:,}/s" if endpoint.max_deliveries_per_second else "",
                  f"{endpoint.max_concurrent} at once" if endpoint.max_concurrent else "",
                  f"{endpoint.max_deliveries_per_second_per_key:,}/s per key"
                  if endpoint.max_deliveries_per_second_per_key else "",
                  f"{endpoint.max_concurrent_per_key} at once per key" if endpoint.max_concurrent_per_key else ""]
        return ", ".join(limit for limit in limits if limit) or "–"

    def base_queryset(self, request):
        return endpoint_list().select_related("team", "health")

    def get_changelist_instance(self, request):
        """The page's endpoints with their message counts (capped, then estimated: counting
        every message of every endpoint read the whole table), one query for the page."""
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        counts = endpoint_count_messages(endpoint_ids=[row.pk for row in rows])
        for row in rows:
            row.message_counts = counts[row.pk]
        changelist.result_list = rows
        return changelist

    def object_action_applies(self, obj, name):
        if name == "rotate_secret":
            return obj.handler == Endpoint.Handler.WEBHOOK
        if name == "enable":  # the platform disabled it: Enable says what Activate would do
            return obj.disabled_at is not None
        if name == "activate":
            return not obj.is_active and obj.disabled_at is None
        return obj.is_active

    @admin.action(description="Activate selected endpoints (binds their queues)", permissions=["change"])
    def activate(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.ENDPOINTS),
                      lambda e: endpoint_set_active(endpoint=e, active=True), "Activated")

    @admin.action(description="Deactivate selected endpoints (pauses delivery)", permissions=["change"])
    def deactivate(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.ENDPOINTS),
                      lambda e: endpoint_set_active(endpoint=e, active=False), "Deactivated")

    @admin.action(description="Enable selected endpoints (resume one the platform disabled; its health reset)",
                  permissions=["change"])
    def enable(self, request, queryset):
        self.run_each(request, self.acting_on(request, queryset, Action.ENDPOINTS),
                      lambda e: endpoint_enable(endpoint=e), "Enabled")

    @admin.action(description="Rotate the webhook secret (the current one signs for a day more)",
                  permissions=["change"])
    def rotate_secret(self, request, queryset):
        """New secrets, shown on the page this answers (never stored in a message or cookie) and
        nowhere else afterwards: each row's ``new_webhook_secret``, the plaintext the service made
        (its fields hold it sealed)."""
        rotated = []
        for endpoint in self.acting_on(request, queryset, Action.ENDPOINTS):
            try:
                rotated.append(endpoint_rotate_secret(endpoint=endpoint))
            except ValidationError as exc:
                self.message_user(request, f"{endpoint}: {'; '.join(exc.messages)}", messages.ERROR)
        if not rotated:
            return None
        return TemplateResponse(request, "admin/scheduling/endpoint/rotated_secrets.html", {
            **self.admin_site.each_context(request), "title": "New webhook secrets", "opts": self.opts,
            "rotated": rotated,
        })

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        caller = self.caller(request)

        def form(data, initial):
            return EndpointCreateForm(data, initial=initial, caller=caller)

        def create(data):
            team = data.pop("team") or (None if caller.operator else team_pick(caller=caller, action=Action.ENDPOINTS))
            return endpoint_create(team=team, **data)  # None: the default team

        return self.service_form_view(request, form, create, title="Add endpoint", done="Created and bound")

    def changelist_view(self, request, extra_context=None):
        if request.method == "GET":
            disabled = list(self.get_queryset(request).filter(disabled_at__isnull=False)
                            .order_by("team__name", "name").values_list("team__name", "name")[:6])
            if disabled:
                names = ", ".join(f"{team}/{name}" for team, name in disabled[:5]) + (", ..." if len(disabled) > 5
                                                                                      else "")
                self.message_user(request, f"Disabled by the platform for failing too long: {names}. Their messages "
                                           f"are kept; select them and run Enable to resume.", messages.WARNING)
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is not None and request.method == "GET" and obj.disabled_at is not None:
            self.message_user(request, self.disabled_banner(obj), messages.WARNING)
        context = {"detail_template": "admin/scheduling/endpoint/health.html",
                   "endpoint_health": self.health_rows(obj) if obj is not None else [], **(extra_context or {})}
        if obj is None or not self.has_change_permission(request, obj):
            return super().change_view(request, object_id, form_url, context)
        initial = {"topology": obj.topology.name, "delivery_mode": obj.delivery_mode, "handler": obj.handler,
                   "handler_target": obj.handler_target, "max_deliveries_per_second": obj.max_deliveries_per_second,
                   "max_concurrent": obj.max_concurrent,
                   "max_deliveries_per_second_per_key": obj.max_deliveries_per_second_per_key,
                   "max_concurrent_per_key": obj.max_concurrent_per_key,
                   "webhook_timeout_seconds": obj.webhook_timeout_seconds}
        response = self.service_form_view(
            request, EndpointChangeForm, lambda data: endpoint_update(endpoint=obj, **data),
            title="Change endpoint", obj=obj, initial=initial, done="Saved",
        )
        if isinstance(response, TemplateResponse):  # the form's page: the read-only state below it
            response.context_data.update(context)
        return response

    @staticmethod
    def disabled_banner(endpoint) -> str:
        return (f"Disabled by the platform at {html.moment(endpoint.disabled_at)} UTC: "
                f"{endpoint.disabled_reason or 'its calls failed for too long'}. Its messages are kept and wait; "
                f"Enable resumes it (its failure count and pause are reset).")

    def health_rows(self, endpoint) -> list[tuple[str, str]]:
        """What the delivery engine knows of the endpoint's calls, as (label, value) rows."""
        try:
            health = endpoint.health
        except EndpointHealth.DoesNotExist:  # no call has failed yet
            health = EndpointHealth(endpoint=endpoint)
        empty = self.get_empty_value_display()

        def when(value):
            return html.moment(value) if value is not None else empty

        return [("disabled at", when(endpoint.disabled_at)), ("disabled because", endpoint.disabled_reason or empty),
                ("consecutive failures", f"{health.consecutive_failures:,}"),
                ("failing since", when(health.failing_since)), ("calls paused until", when(health.paused_until)),
                ("circuit opened (in a row)", f"{health.circuit_opened:,}"),
                ("last success", when(health.last_success_at)), ("last failure", when(health.last_failure_at)),
                ("last error", health.last_error or empty)]
