"""The pure core: standard library only, no I/O. A message's lifecycle, times on the wire and
durations, the retry rule, flow control's gate and limits, the lateness buckets, page cursors,
networks, the deliver tasks' names, the errors services raise."""

# Imports nothing at module level: settings.py and the Celery app import modules below it early.
