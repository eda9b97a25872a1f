"""A Celery app of another codebase: its own module tree, nothing of the platform's but the
client package. Configured from the environment the test gives its worker."""
