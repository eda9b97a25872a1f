"""Topology versions: provision and verify cascades, and look inside one (messages in flight
per level, summed over the version's shards with each shard's count beside it, the unroutable
queue, the delivery exchange's endpoint bindings)."""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from rabbit import ManagementUnavailable
from scheduling.admin import html
from scheduling.admin.base import ControlRoomAdmin
from scheduling.models import TopologyVersion
from scheduling.moves.delays import delays_preview
from scheduling.versions.broker import topology_get_in_flight, topology_version_count_in_flight
from scheduling.versions.selectors import (
    LEVEL_COUNT_TIMEOUT_MS,
    topology_count_messages_by_level,
    topology_version_get_default,
)
from scheduling.versions.services import topology_provision, topology_verify
from topology import cascade, explain


@admin.register(TopologyVersion)
class TopologyVersionAdmin(ControlRoomAdmin):
    list_display = ("name", "prefix", "levels", "shard_count", "routing", "queue_kind", "is_default", "in_flight",
                    "provisioned", "verified", "verify_state")
    actions = ("provision", "verify", "preview_migration")
    object_actions = {"provision": "Provision", "verify": "Verify"}
    fields = ("name", "prefix", "levels", "shard_count", "routing", "queue_kind", "is_default", "max_delay",
              "provisioned", "verified", "verify_state", "problems")
    readonly_fields = fields
    # the cascades are the platform's, every team's messages in them: operators only
    team_actions = {"view": None, "add": None, "change": None, "provision": None}

    def get_queryset(self, request):
        return self.base_queryset(request) if self.caller(request).operator else TopologyVersion.objects.none()

    def has_add_permission(self, request):
        return False  # versions are data seeded by migrations

    def has_change_permission(self, request, obj=None):
        return False  # a prefix or level count changed here would no longer match the broker

    def has_provision_permission(self, request):
        return self.may(request, "provision")

    has_verify_permission = has_provision_permission
    has_preview_migration_permission = has_provision_permission

    def get_list_display(self, request):
        """The "in flight" column reads the broker once per page: a callable column made for
        this request, holding that one management API answer."""
        try:
            counts = topology_version_count_in_flight()
        except ManagementUnavailable:
            counts = {}

        @admin.display(description="in flight")
        def in_flight(version):
            count = counts.get(version.name)
            return "—" if count is None else count

        return [in_flight if column == "in_flight" else column for column in self.list_display]

    @admin.display(description="in flight")
    def in_flight(self, version):
        """Stands in for the column get_list_display makes per request (admin checks need it)."""
        return "—"

    @admin.display(description="shards")
    def shard_count(self, version):
        """The configured count (DELAY_SHARDS); the provisioned one beside it when they differ."""
        configured = version.cascade.shards
        if version.provisioned_at is None or version.shards == configured:
            return configured
        return f"{configured} (provisioned with {version.shards}: provision again)"

    @admin.display(description="levels route by")
    def routing(self, version):
        if version.cascade.routing == cascade.DIRECT:
            return "direct exchanges, CC bit keys"
        return "topic keys (NServiceBus)"

    @admin.display(description="default", boolean=True)
    def is_default(self, version):
        default = topology_version_get_default()
        return default is not None and version.pk == default.pk

    @admin.action(description="Preview migrating selected versions' delayed messages to the default version (dry run)",
                  permissions=["preview_migration"])
    def preview_migration(self, request, queryset):
        target = topology_version_get_default()

        def call(version):
            if version.pk == target.pk:
                self.message_user(request, f"{version} is the default version: nothing to migrate it to",
                                  messages.WARNING)
                return
            preview = delays_preview(source=version, target=target)
            levels = ", ".join(f"L{level:02d}: {n}" for level, n in sorted(preview.per_level.items(), reverse=True))
            self.message_user(
                request,
                f"{version} -> {target}: {preview.found} delayed message(s) ({levels or 'all levels empty'}); "
                f"{preview.moved} would move ({preview.immediate} straight to delivery), {preview.poisoned} to the "
                f"poison queue, {preview.dropped} stale copies dropped. Nothing was moved; run "
                f"manage.py migrate_delays --from {version} --to {target}",
            )

        self.run_each(request, queryset, call, "Previewed")

    @admin.action(description="Provision selected versions (declare their cascades)", permissions=["provision"])
    def provision(self, request, queryset):
        def call(version):
            result = topology_provision(version=version.cascade)
            plan = result.plan
            shards = f" over {plan.version.shards} shards" if plan.version.shards > 1 else ""
            self.message_user(request, f"{version}: declared {len(plan.exchanges)} exchanges, {len(plan.queues)} "
                                       f"queues and {len(plan.bindings)} bindings{shards} in {result.seconds:.2f} s")

        self.run_each(request, queryset, call, "Provisioned")

    @admin.action(description="Verify selected versions against the broker", permissions=["verify"])
    def verify(self, request, queryset):
        def call(version):
            result = topology_verify(version=version.cascade)
            for warning in result.warnings:
                self.message_user(request, f"{version}: {warning}", messages.WARNING)
            self.message_user(request, f"{version}: {result.leaders}", messages.INFO)
            problems = result.problems
            if problems:
                items = format_html_join("", "<li>{}</li>", ((p,) for p in problems))
                self.message_user(request, format_html("{}: {} problem(s)<ul>{}</ul>", version, len(problems), items),
                                  messages.WARNING)
            else:
                self.message_user(request, f"{version}: the broker matches the plan", messages.SUCCESS)

        self.run_each(request, queryset, call, "Verified")

    provisioned = html.moment_column("provisioned_at", "last provisioned (UTC)")
    verified = html.moment_column("verified_at", "last verified (UTC)")

    @admin.display(description="max delay")
    def max_delay(self, version):
        return explain.format_duration(version.max_delay_ms)

    @admin.display(description="verify")
    def verify_state(self, version):
        if version.verified_at is None:
            return "never"
        return "healthy" if not version.verify_problems else f"{len(version.verify_problems)} problem(s)"

    @admin.display(description="problems at last verify")
    def problems(self, version):
        return format_html_join("", "<li>{}</li>", ((p,) for p in version.verify_problems)) or "none"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        version = self.get_object(request, unquote(object_id))
        context = {"detail_template": "admin/scheduling/topology_in_flight.html", **(extra_context or {})}
        if version is not None:
            try:
                context["in_flight"] = in_flight = topology_get_in_flight(version=version)
                context["versions_in_flight"] = topology_version_count_in_flight()
                counted = topology_count_messages_by_level(version=version, now=timezone.now())
                context["level_rows"] = [(level, None if counted is None else counted.get(level.level, 0))
                                         for level in in_flight.levels]
                context["messages_counted"], context["level_count_timeout_ms"] = counted is not None, LEVEL_COUNT_TIMEOUT_MS
                context["messages_leaving"] = None if counted is None else counted.get(None, 0)
            except ManagementUnavailable as exc:
                context["in_flight_error"] = str(exc)
        return super().change_view(request, object_id, form_url, context)
