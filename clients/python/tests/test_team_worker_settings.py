"""The Celery settings of a worker on its team's own broker user: every name Celery derives from
them (kombu's Mailbox, Celery's events) starts with or ends in the team's ``<team>--`` names, the
only ones that user may declare (the platform's scheduling/teams/broker_access.py)."""

from kombu.pidbox import Mailbox

from delayclient.celery import team_worker_settings


def test_the_worker_s_own_names_are_the_team_s():
    settings = team_worker_settings("shop")
    assert settings == {"control_exchange": "shop--celery", "event_exchange": "shop--celeryev",
                        "event_queue_prefix": "shop--celeryev"}
    mailbox = Mailbox(settings["control_exchange"])
    assert mailbox.exchange.name == "shop--celery.pidbox"
    assert mailbox.reply_exchange.name == "reply.shop--celery.pidbox"
    assert mailbox.get_queue("celery@host").name == "celery@host.shop--celery.pidbox"  # not the platform's
    assert mailbox.get_reply_queue().name.endswith(".reply.shop--celery.pidbox")
