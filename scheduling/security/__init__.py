"""Security: what handlers may reach (guards.py: webhook targets against SSRF, the Celery task
allowlist, the CIDR lists), how webhooks are signed (webhook_signing.py, Standard Webhooks), how
their secrets are encrypted at rest (secret_box.py), and the address a login came from
(client_ip.py, for django-axes)."""

# Import-light on purpose: settings.py imports guards before Django is set up, which imports this
# package first.
