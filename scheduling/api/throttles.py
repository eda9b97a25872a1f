"""Per-user rate limit of the API (DELAY_API_RATE), counting a bulk request by its messages: a
bulk of 1,000 costs what 1,000 single requests cost, and one that does not fit in what is left of
the window is refused whole (429 with Retry-After) before anything is stored.

The history lives in the "throttle" cache (a database table by default), so every web process
counts against the same budget. It is a sliding window kept as at most 60 slots of
1/60 of the period each, rounded up (a slot expires at most one slot late, never early), so
the entry stays small at any rate. Concurrent requests of one user may overlap a little
(read, then write), as with DRF's own throttles."""

import math

from django.core.cache import caches
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

from ..conf import conf, setting_name

SLOTS = 60
BULK_ACTIONS = frozenset({"bulk"})
PERIODS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}


def request_cost(request, view) -> int:
    """1 per request; a bulk request costs its number of messages (one longer than the bulk limit
    costs 1: the serializer refuses it with a 400)."""
    if getattr(view, "action", None) not in BULK_ACTIONS or request.method != "POST":
        return 1
    data = request.data
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list) and 0 < len(messages) <= conf().bulk_max:
        return len(messages)
    return 1


class ItemRateThrottle(SimpleRateThrottle):
    scope = "api"
    cache_format = "dp:throttle:%(scope)s:%(ident)s"

    def get_rate(self):
        return conf().api_rate  # None: off

    @property
    def cache(self):
        return caches["throttle"]

    def get_cache_key(self, request, view):
        ident = request.user.pk if request.user and request.user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        self.now = self.timer()
        width = self.duration / SLOTS
        self.history = [(at, n) for at, n in self.cache.get(self.key, []) if at > self.now - self.duration]
        self.cost = request_cost(request, view)
        used = sum(n for _, n in self.history)
        if self.cost > self.num_requests:
            raise Throttled(detail=(
                f"{self.cost:,} messages at once are more than the rate limit allows in a whole "
                f"{PERIODS[self.rate.split('/')[1][0]]} ({self.num_requests:,}, {setting_name('api_rate')}); "
                "send fewer at once"))
        if used + self.cost > self.num_requests:
            self.excess = used + self.cost - self.num_requests
            return False
        slot = math.ceil(self.now / width) * width
        if self.history and self.history[0][0] == slot:
            self.history[0] = (slot, self.history[0][1] + self.cost)
        else:
            self.history.insert(0, (slot, self.cost))
        self.cache.set(self.key, self.history, self.duration + width)
        return True

    def wait(self) -> float:
        """Seconds until the oldest slots have expired enough for this request to fit."""
        freed = 0
        for at, n in reversed(self.history):  # oldest first
            freed += n
            if freed >= self.excess:
                return max(at + self.duration - self.now, 0.001)
        return self.duration
