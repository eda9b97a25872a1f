"""Writes: every change to the platform's state goes through a function here (the accuracy
report's and the delayed Celery tasks' own are reports/services.py and celery/services.py).
Each is keyword-only and named <entity>_<verb> (message_schedule, endpoint_create, ...).

Callers import each function from its module, ``from scheduling.services.messages import
message_schedule``; nothing is re-exported here, so importing one service never imports the rest.
"""
