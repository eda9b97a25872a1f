"""Names of the platform's Celery tasks. Services enqueue them by name (``send_task``), so the
write path never imports tasks.py, which imports the services (no cycle, no arrow back up)."""

RELAY_SWEEP = "scheduling.relay.sweep"
RELAY_TIMEOUTS = "scheduling.relay.timeouts"
DRAIN_UNROUTABLE = "scheduling.relay.drain_unroutable"
ORDERING_SWEEP = "scheduling.relay.ordering_sweep"
DELIVER = "scheduling.deliver"
DELIVER_ENVELOPE = "scheduling.deliver_envelope"
FAN_OUT_EVENT = "scheduling.fan_out_event"
ACCURACY_NIGHTLY = "scheduling.reports.accuracy_nightly"
PRUNE = "scheduling.retention.prune"
SCHEDULE_RUNS = "scheduling.schedules.create_runs"
BULK_ACTION = "scheduling.relay.bulk_action"
