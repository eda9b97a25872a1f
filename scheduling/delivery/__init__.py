"""Delivery: what handing a message over means. Recording a hand-over once (services.py), the
handlers (nothing, a Celery task, a webhook), the webhook engine (webhooks.py, fairness.py:
one event loop, round robin over teams and endpoints) and its recorder thread, the calls' records
and pushback (Retry-After, the circuit), flow control's shared slots (flow_slots.py), the
delivery log and the dashboard's per-minute figures. The loop that drives it is worker/."""

# Import-light on purpose: the Celery app imports modules below it while it is built.
