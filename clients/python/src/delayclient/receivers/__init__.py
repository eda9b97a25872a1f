"""Receiving the platform's webhooks: verify their Standard Webhooks signature and timestamp,
and answer a duplicate (the platform delivers at least once) without handling it twice.

    from delayclient.receivers import Receiver, WebhookError, WebhookReplayed

    receiver = Receiver(os.environ["DELAY_WEBHOOK_SECRET"])
    try:
        webhook = receiver.verify(raw_body, headers)   # the raw body, as received
    except WebhookReplayed:
        return 200                                     # handled before: done
    except WebhookError as exc:
        return 400, str(exc)                           # not from the platform, or stale
    handle(webhook.payload)
    receiver.done(webhook)                             # only now: a failure is delivered again

Framework helpers (each imports only its framework): ``delayclient.receivers.django``,
``.flask``, ``.fastapi``.
"""

from ..errors import WebhookError, WebhookReplayed
from ._core import MAX_BODY, MAX_HEADER, MAX_TOLERANCE, Receiver, Secret, Webhook, check_secret, verify
from .stores import CacheStore, MemoryStore, SeenStore

__all__ = [
    "MAX_BODY",
    "MAX_HEADER",
    "MAX_TOLERANCE",
    "CacheStore",
    "MemoryStore",
    "Receiver",
    "Secret",
    "SeenStore",
    "Webhook",
    "WebhookError",
    "WebhookReplayed",
    "check_secret",
    "verify",
]
