"""A Flask view receiving the platform's webhooks::

    from delayclient.receivers.flask import webhook_view

    @app.post("/hooks/orders")
    @webhook_view(secret=lambda: app.config["DELAY_WEBHOOK_SECRET"])
    def orders_hook(webhook):
        mark_due(webhook.payload["order"])   # None answers 204; or return any Flask answer

It answers: 405 to anything but POST; 400 ``{"error": reason}`` to a webhook that fails
verification; 200 ``{"duplicate": true}`` to an id already handled, without calling the handler;
else the handler's answer. The id is marked handled only when that answer is a 2xx (what the
platform counts as delivered), so an exception or an error answer is delivered again. Pass
``receiver=Receiver(..., seen=CacheStore(cache))`` to share handled ids between processes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flask

from ..errors import WebhookError, WebhookReplayed
from ._core import MAX_TOLERANCE, Receiver, Secret, make_receiver


def webhook_view(secret: Secret | None = None, *, previous_secret: Secret | None = None,
                 receiver: Receiver | None = None,
                 tolerance: int = MAX_TOLERANCE) -> Callable[[Callable], Callable]:
    """Decorate ``handler(webhook, **url_values)``; secrets may be callables, read at each request."""
    rcv = make_receiver(secret, previous_secret, receiver, tolerance)

    def decorate(handler: Callable[..., Any]) -> Callable:
        @functools.wraps(handler)
        def view(*args, **kwargs) -> flask.Response:
            request = flask.request
            if request.method != "POST":
                return flask.Response(status=405, headers={"Allow": "POST"})
            try:
                rcv.check_length(request.content_length)
                webhook = rcv.verify(request.get_data(), request.headers)  # type: ignore[arg-type]
            except WebhookReplayed:
                return flask.jsonify(duplicate=True)
            except WebhookError as exc:
                return flask.make_response(flask.jsonify(error=str(exc)), 400)
            result = handler(webhook, *args, **kwargs)
            response = flask.Response(status=204) if result is None else flask.make_response(result)
            rcv.answered(webhook, response.status_code)
            return response

        view.receiver = rcv  # type: ignore[attr-defined]
        return view

    return decorate
