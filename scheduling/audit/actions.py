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
