"""What the platform tells a team about its messages and endpoints, and callbacks per message
(docs/guides/notifications.md): the facts and the routes. The rows are written by the messages'
own outbox (messages/notification_outbox.py), below, so that the paths that end messages may tell."""
