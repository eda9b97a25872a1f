"""Moving messages in flight: between cascades (delays.py, migrate_delays), the timeout queues to
their new home (timeouts.py), and back into the broker after a database restore (restore.py). An
operation on messages, above them: it reads endpoints and versions and publishes through the relay."""
