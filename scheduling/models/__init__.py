"""The platform's data, one module per domain, below every domain: a model holds its data and
invariants and imports only what is below it (config, core, db); writes live in the domains'
services, the messages' bulk statements in querysets.py. Django loads this package as the
``scheduling`` app's models; the names are re-exported so a caller writes
``from scheduling.models import Endpoint`` whatever module defines it."""

from scheduling.models.audit import AuditArchiveFile, AuditEvent
from scheduling.models.delivery import AttemptOutcome, EndpointHealth, MessageAttempt, OrphanCopy, Trigger
from scheduling.models.endpoints import (
    FLOW_KEY_MAX_LENGTH,
    FLOW_LIMITS,
    DeliveryMode,
    Endpoint,
    EndpointFlow,
    EndpointKeyFlow,
    endpoint_name_validator,
)
from scheduling.models.events import Event, Subscription
from scheduling.models.messages import BulkAction, CascadeCopy, FailedMessage, OrderingTurn, ScheduledMessage
from scheduling.models.notifications import NotificationRoute, NotificationType, QuotaWarning
from scheduling.models.reports import AccuracyReport, ArchiveFile, DeliveryMinute
from scheduling.models.schedules import Schedule, schedule_key_validator
from scheduling.models.teams import ApiKey, Invitation, Membership, Team, default_team_id
from scheduling.models.versions import TopologyVersion

__all__ = [
    "AccuracyReport", "ApiKey", "ArchiveFile", "AttemptOutcome", "AuditArchiveFile", "AuditEvent", "BulkAction",
    "CascadeCopy", "DeliveryMinute", "DeliveryMode", "Endpoint", "EndpointFlow", "EndpointHealth", "EndpointKeyFlow",
    "Event", "FLOW_KEY_MAX_LENGTH", "FLOW_LIMITS", "FailedMessage", "Invitation", "Membership", "MessageAttempt",
    "NotificationRoute", "NotificationType", "OrderingTurn", "OrphanCopy", "QuotaWarning", "Schedule",
    "ScheduledMessage", "Subscription", "Team", "TopologyVersion", "Trigger", "default_team_id",
    "endpoint_name_validator", "schedule_key_validator",
]
