"""Fan-out: topics, subscriptions and events (docs/guides/events.md)."""
