"""Cascade versions (the TopologyVersion rows: v1, v2, v3 and their shards): declaring,
provisioning and verifying them against the broker, and reading them. Moving messages between
versions is moves/, above the messages it moves."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
