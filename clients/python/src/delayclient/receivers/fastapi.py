"""A FastAPI dependency receiving the platform's webhooks::

    from delayclient.receivers import Webhook
    from delayclient.receivers.fastapi import VerifiedWebhook

    verified = VerifiedWebhook(secret=lambda: os.environ["DELAY_WEBHOOK_SECRET"])

    @app.post("/hooks/orders", status_code=204)
    async def orders_hook(webhook: Webhook = Depends(verified)):
        await mark_due(webhook.payload["order"])
        verified.done(webhook)   # the route's job, once handled: a failure is delivered again

A webhook that fails verification raises ``HTTPException(400, detail=reason)``.

An id already handled raises ``DuplicateWebhook``, an HTTPException with status **200** and
detail ``{"duplicate": true}``: a dependency ends a request in FastAPI by raising, and only an
exception can keep the route from running, so a duplicate never reaches the handler and needs no
check in it, nor any handler registered on the app (FastAPI answers every HTTPException itself:
``{"detail": {"duplicate": true}}`` with 200, which the platform counts as delivered). To answer
it differently, register a handler for DuplicateWebhook. Returning the webhook flagged as a
duplicate instead would handle it twice in every route that forgot the check.

The seen store is called on the event loop: keep it fast (the default, in memory, is).
"""

from __future__ import annotations

from fastapi import HTTPException, Request

from ..errors import WebhookError, WebhookReplayed
from ._core import MAX_TOLERANCE, Receiver, Secret, Webhook, make_receiver


class DuplicateWebhook(HTTPException):
    """An id already handled: answered 200 without running the route."""

    def __init__(self, id: str):
        super().__init__(status_code=200, detail={"duplicate": True})
        self.id = id


class VerifiedWebhook:
    """``Depends(VerifiedWebhook(secret=...))``: the verified Webhook, or the request ends with
    400 (bad) or 200 (duplicate). Secrets may be callables, read at each request."""

    def __init__(self, secret: Secret | None = None, *, previous_secret: Secret | None = None,
                 receiver: Receiver | None = None, tolerance: int = MAX_TOLERANCE):
        self.receiver = make_receiver(secret, previous_secret, receiver, tolerance)

    async def __call__(self, request: Request) -> Webhook:
        try:
            self.receiver.check_length(request.headers.get("content-length"))
            return self.receiver.verify(await request.body(), request.headers)
        except WebhookReplayed:
            raise DuplicateWebhook(request.headers.get("webhook-id", "")) from None
        except WebhookError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None

    def done(self, webhook: Webhook) -> None:
        """Mark ``webhook`` handled: call it once the route has succeeded."""
        self.receiver.done(webhook)
