"""A Django view receiving the platform's webhooks::

    from delayclient.receivers.django import webhook_view

    @webhook_view(secret=lambda: settings.DELAY_WEBHOOK_SECRET)
    def orders_hook(request, webhook):
        Order.objects.filter(pk=webhook.payload["order"]).update(state="due")
        # None answers 204; or return an HttpResponse

It is CSRF-exempt (the signature authenticates it) and answers: 405 to anything but POST; 400
``{"error": reason}`` to a webhook that fails verification; 200 ``{"duplicate": true}`` to an id
already handled, without calling the handler; else the handler's answer. The id is marked
handled only when that answer is a 2xx (what the platform counts as delivered), so an exception
or an error answer is delivered again. Pass ``receiver=Receiver(..., seen=CacheStore(cache))`` to
share handled ids between processes. Sync views only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ..errors import WebhookError, WebhookReplayed
from ._core import MAX_TOLERANCE, Receiver, Secret, Webhook, make_receiver

Handler = Callable[..., HttpResponse | None]


def webhook_view(secret: Secret | None = None, *, previous_secret: Secret | None = None,
                 receiver: Receiver | None = None,
                 tolerance: int = MAX_TOLERANCE) -> Callable[[Handler], Callable]:
    """Decorate ``handler(request, webhook, *url_args, **url_kwargs)``; secrets may be callables,
    read at each request."""
    rcv = make_receiver(secret, previous_secret, receiver, tolerance)

    def decorate(handler: Handler) -> Callable:
        @csrf_exempt
        @functools.wraps(handler)
        def view(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            try:
                rcv.check_length(request.META.get("CONTENT_LENGTH") or None)
                webhook: Webhook = rcv.verify(request.body, request.headers)
            except WebhookReplayed:
                return JsonResponse({"duplicate": True})
            except WebhookError as exc:
                return JsonResponse({"error": str(exc)}, status=400)
            response = handler(request, webhook, *args, **kwargs)
            if response is None:
                response = HttpResponse(status=204)
            rcv.answered(webhook, response.status_code)
            return response

        view.receiver = rcv  # type: ignore[attr-defined]
        return view

    return decorate
