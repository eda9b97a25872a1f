"""Plain forms for the admin's create/edit pages: they parse input; every rule about what is
allowed lives in the services, shared with the API (see base.service_form_view)."""

from django import forms

from scheduling.config.conf import setting_name
from scheduling.core.caller import Caller
from scheduling.core.flow_gate import MAX_CONCURRENT, MAX_DELIVERIES_PER_SECOND
from scheduling.core.ordering import Overlap
from scheduling.core.roles import Action
from scheduling.endpoints.selectors import endpoint_list
from scheduling.models import FLOW_KEY_MAX_LENGTH, DeliveryMode, Endpoint, Schedule, Team, TopologyVersion
from scheduling.retention.services import retention_describe
from scheduling.teams.selectors import queryset_for_caller
from scheduling.versions.selectors import topology_version_get_default

ISO_HELP = "UTC unless it names an offset, e.g. 2026-11-21T12:00:00.250Z"


class VersionChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.name} ({obj.prefix}, {obj.get_queue_kind_display()})"


def _version_field() -> VersionChoiceField:
    return VersionChoiceField(
        queryset=TopologyVersion.objects.all(), to_field_name="name", empty_label=None,
        help_text="cascade the endpoint's messages go through",
    )


class EndpointChangeForm(forms.Form):
    topology = _version_field()
    delivery_mode = forms.TypedChoiceField(
        choices=DeliveryMode.choices, initial=DeliveryMode.NATIVE, required=False, empty_value=None,
        help_text="where new messages wait: the cascade, or rows in the database (the timeout manager)",
    )
    handler = forms.ChoiceField(choices=Endpoint.Handler.choices)
    handler_target = forms.CharField(required=False, max_length=500, help_text="Celery task name, or the webhook's URL")
    max_deliveries_per_second = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_DELIVERIES_PER_SECOND,
        help_text="flow control: hand-overs in any one second, across all workers (empty: no limit)")
    max_concurrent = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENT,
        help_text="flow control: webhook calls in flight at once, across all workers (empty: no limit)")
    max_deliveries_per_second_per_key = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_DELIVERIES_PER_SECOND, label="Max deliveries per second per key",
        help_text="flow control by key: hand-overs in any one second per flow key of its messages, across all "
                  "workers (empty: no limit)")
    max_concurrent_per_key = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENT, label="Max concurrent per key",
        help_text="flow control by key: webhook calls in flight at once per flow key, across all workers "
                  "(empty: no limit)")
    webhook_timeout_seconds = forms.FloatField(
        required=False, min_value=0.1, label="Webhook deadline (seconds)",
        help_text=f"one deadline over each webhook call: connect, send, read the answer (empty: the platform's, "
                  f"{setting_name('webhook_timeout_seconds')}; at most {setting_name('webhook_timeout_max_seconds')})")


class EndpointCreateForm(EndpointChangeForm):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), required=False, empty_label="(your only team)",
                                  help_text="the team that owns it (those whose endpoints you manage; operators: "
                                            "empty is the default team)")
    name = forms.CharField(
        max_length=100, help_text="letters, digits, '-' and '_': its queue is <team>--<name>"
    )
    queue = forms.CharField(required=False, max_length=255,
                            help_text="operators only: bind it to this exact queue instead (NServiceBus interop, a "
                                      "Celery queue)")
    webhook_secret = forms.CharField(
        required=False, max_length=128, widget=forms.PasswordInput(render_value=True),
        help_text="Standard Webhooks signing secret, whsec_<base64 of 24-64 random bytes>; generated when left "
                  "empty (the endpoint's 'Rotate webhook secret' button shows a new one, once)",
    )
    is_active = forms.BooleanField(required=False, initial=True)
    field_order = ["team", "name", "queue", "topology", "delivery_mode", "handler", "handler_target",
                   "webhook_secret", "max_deliveries_per_second", "max_concurrent",
                   "max_deliveries_per_second_per_key", "max_concurrent_per_key", "webhook_timeout_seconds",
                   "is_active"]

    def clean_delivery_mode(self):
        return self.cleaned_data["delivery_mode"] or DeliveryMode.NATIVE

    def clean_queue(self):
        return self.cleaned_data["queue"] or None

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        default = topology_version_get_default()
        if default is not None:
            self.fields["topology"].initial = default.name
        self.fields["team"].queryset = queryset_for_caller(queryset=Team.objects.order_by("name"), caller=caller,
                                                           action=Action.ENDPOINTS)
        if not caller.operator:
            del self.fields["queue"]


class EndpointChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.team.name}/{obj.name} ({obj.topology.name}{'' if obj.is_active else ', inactive'})"


def endpoint_choices(caller: Caller, action: Action):
    """The endpoints of the teams where ``caller`` may do ``action`` (a form's choices)."""
    return queryset_for_caller(queryset=endpoint_list().select_related("team").order_by("team__name", "name"),
                               caller=caller, action=action)


class ScheduleMessageForm(forms.Form):
    endpoint = EndpointChoiceField(queryset=Endpoint.objects.none())
    # Not required here: {} and [] are payloads too; the service says what is missing.
    payload = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
                              help_text="any JSON value")
    delay_seconds = forms.DecimalField(
        required=False, help_text="seconds from now (fractions allowed); or give a deliver-at time"
    )
    deliver_at = forms.DateTimeField(required=False, help_text=ISO_HELP)
    idempotency_key = forms.CharField(
        required=False, max_length=255, help_text="the same key on the same endpoint returns the existing message"
    )
    expires_at = forms.DateTimeField(required=False, help_text="never handed over from this time on (it ends "
                                                               "expired); or give seconds after the due time")
    expire_after_seconds = forms.DecimalField(required=False, help_text="seconds after the due time from which it "
                                                                        "is never handed over (empty: never expires)")
    flow_key = forms.CharField(
        required=False, max_length=FLOW_KEY_MAX_LENGTH,
        help_text="its flow key: the endpoint's per-key limits count it with the messages of the same key")

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["endpoint"].queryset = endpoint_choices(caller, Action.SCHEDULE)
        self.fields["idempotency_key"].help_text += f" while that message is kept ({retention_describe()})"


class ScheduleForm(forms.Form):
    """A recurring schedule (an upsert: the service checks the rule, the payload and the key)."""

    key = forms.CharField(max_length=200, help_text="unique in its team (the endpoint's): letters, digits, '-' and "
                                                    "'_', in words joined by '.' or ':'")
    endpoint = EndpointChoiceField(queryset=Endpoint.objects.none())
    payload = forms.JSONField(required=False, widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
                              help_text="any JSON value: every run carries it")
    cron = forms.CharField(required=False, max_length=200,
                           help_text="five fields: minute hour day month weekday, e.g. 30 2 * * 1-5; or give an "
                                     "interval")
    timezone = forms.CharField(max_length=64, initial="UTC", help_text="IANA name the cron rule is read in")
    interval_seconds = forms.DecimalField(required=False, help_text="seconds between runs, at least 1")
    start_at = forms.DateTimeField(required=False, help_text=f"no run before this; {ISO_HELP}")
    end_at = forms.DateTimeField(required=False, help_text="no run after this")
    missed_runs = forms.ChoiceField(choices=Schedule.MissedRuns.choices, initial=Schedule.MissedRuns.SKIP)
    jitter_seconds = forms.DecimalField(required=False, help_text="each run is due a fixed offset in [0, this) "
                                                                  "after its time: below the gap between two runs")
    catchup_seconds = forms.DecimalField(required=False, help_text="after a downtime, the missed runs due within "
                                                                   "this before now are made; empty: missed runs")
    overlap = forms.ChoiceField(
        choices=[(o.value, o.value) for o in Overlap], initial=Overlap.ALLOW.value,
        help_text="a run due while the previous run has not ended: sent anyway (allow), ended skipped (skip), or "
                  "kept waiting for its end, one at most (buffer_one)")

    def __init__(self, *args, caller: Caller, next_runs=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["endpoint"].queryset = endpoint_choices(caller, Action.SCHEDULES)
        if next_runs is not None:
            self.fields["key"].disabled = True
            listed = ", ".join(f"{run:%Y-%m-%d %H:%M:%S}" for run in next_runs) or "none"
            self.fields["cron"].help_text += f". Next runs (UTC): {listed}"

    @staticmethod
    def service_arguments(data: dict) -> dict:
        """The upsert's arguments: the schedule belongs to its endpoint's team."""
        return {**{k: v for k, v in data.items() if k != "timezone"}, "timezone_name": data["timezone"],
                "cron": data["cron"] or "", "team": data["endpoint"].team}


class RescheduleForm(forms.Form):
    delay_seconds = forms.DecimalField(required=False, help_text="seconds from now (fractions allowed); or give a "
                                                                 "deliver-at time")
    deliver_at = forms.DateTimeField(required=False, help_text=ISO_HELP)
