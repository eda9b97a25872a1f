"""The delay platform's Django app. docs/architecture.md says what lives where."""

# Import-light on purpose: settings.py and gunicorn.conf.py import modules of this package before
# Django is set up, which imports this first.
