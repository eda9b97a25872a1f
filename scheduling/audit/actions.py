"""Audit actions, declared once and used by name (``entity.verb``): what the audit log's
``action`` column holds, and what docs/guides/teams.md lists. Pure."""

from __future__ import annotations

# members: joined by accepting an invitation (member.add) or added by an operator
MEMBER_ADD = "member.add"
MEMBER_CHANGE = "member.change"
MEMBER_REMOVE = "member.remove"

# invitations: a team admin invites (or revokes the invitation), the invited user answers
INVITATION_CREATE = "invitation.create"
INVITATION_REVOKE = "invitation.revoke"
INVITATION_ACCEPT = "invitation.accept"
INVITATION_DECLINE = "invitation.decline"

# API keys (a key made with a person's key is revoked with it: key.revoke, once per key)
KEY_CREATE = "key.create"
KEY_REVOKE = "key.revoke"

# orphan copies (copies naming no row, set aside): an operator deletes the ones decided on
ORPHAN_COPY_DELETE = "orphan_copy.delete"

# fan-out (issue 48): a team's subscriptions, and its events published and cancelled
SUBSCRIPTION_CREATE = "subscription.create"
SUBSCRIPTION_DELETE = "subscription.delete"
EVENT_PUBLISH = "event.publish"
EVENT_CANCEL = "event.cancel"
# notification routes (issue 48): where a team hears what happened
NOTIFICATION_ROUTE_CREATE = "notification_route.create"
NOTIFICATION_ROUTE_DELETE = "notification_route.delete"

# teams: made and changed by operators (create_team, the admin); a team's own RabbitMQ user
TEAM_CREATE = "team.create"
TEAM_UPDATE = "team.update"
TEAM_BROKER_USER_CREATE = "team.broker_user_create"
TEAM_BROKER_USER_ROTATE = "team.broker_user_rotate"

# endpoints (endpoint.disable: the platform's circuit turned a failing webhook off)
ENDPOINT_CREATE = "endpoint.create"
ENDPOINT_UPDATE = "endpoint.update"
ENDPOINT_ACTIVATE = "endpoint.activate"
ENDPOINT_DEACTIVATE = "endpoint.deactivate"
ENDPOINT_ENABLE = "endpoint.enable"
ENDPOINT_DISABLE = "endpoint.disable"
ENDPOINT_ROTATE_SECRET = "endpoint.rotate_secret"

# recurring schedules
SCHEDULE_CREATE = "schedule.create"
SCHEDULE_UPDATE = "schedule.update"
SCHEDULE_PAUSE = "schedule.pause"
SCHEDULE_RESUME = "schedule.resume"
SCHEDULE_DELETE = "schedule.delete"

# a message's own events (as many as the API's traffic: audit/selectors.py TRAFFIC_ACTIONS)
MESSAGE_SCHEDULE = "message.schedule"
MESSAGE_SCHEDULE_BULK = "message.schedule_bulk"  # one row per bulk request, with its count
MESSAGE_CANCEL = "message.cancel"
MESSAGE_REPUBLISH = "message.republish"
MESSAGE_RESEND = "message.resend"
MESSAGE_RESCHEDULE = "message.reschedule"
# an action on every message matching a filter, by its kind (models.BulkAction.Kind)
MESSAGE_BULK_CANCEL = "message.bulk_cancel"
MESSAGE_BULK_REPUBLISH = "message.bulk_republish"
MESSAGE_BULK = {"cancel": MESSAGE_BULK_CANCEL, "republish": MESSAGE_BULK_REPUBLISH}

# a cascade provisioned (provision_delays, the API)
TOPOLOGY_PROVISION = "topology.provision"

# one row per run of a command that moves or rewrites many rows at once (a PlatformCommand with
# audit_runs), by the command's name: a command not named here cannot audit its runs
COMMAND_RUN = {name: f"command.{name}" for name in (
    "accuracy_report", "export_deliveries", "migrate_delays", "migrate_timeouts", "prune_messages",
    "reconcile_after_restore", "rotate_secrets_key", "transfer_delays")}

# every action there is: what the audit log's rows may say (tests/scheduling/audit/test_actions.py)
ALL = frozenset({value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)}
                | set(MESSAGE_BULK.values()) | set(COMMAND_RUN.values()))
