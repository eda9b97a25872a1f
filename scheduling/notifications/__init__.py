"""What the platform tells a team about its messages and endpoints, and callbacks per message
(docs/guides/notifications.md)."""
