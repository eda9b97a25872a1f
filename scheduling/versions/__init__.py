"""Cascade versions (the TopologyVersion rows: v1, v2, v3 and their shards): declaring,
provisioning and verifying them against the broker, reading them, and moving waiting messages
from one version to another (moves.py, timeouts.py)."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
