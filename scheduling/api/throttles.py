"""Per-user rate limit of the API (DELAY_API_RATE), counting a bulk request by its messages: a
bulk of 1,000 costs what 1,000 single requests cost, and one that does not fit in what is left of
the window is refused whole (429 with Retry-After) before anything is stored.

The history lives in the "throttle" cache (a database table by default), so every web process
counts against the same budget. It is a sliding window kept as at most 60 slots of
1/60 of the period each, rounded up (a slot expires at most one slot late, never early), so
the entry stays small at any rate. Concurrent requests of one user may overlap a little
(read, then write), as with DRF's own throttles.

Off the hot path: a process takes its user's budget from the shared history in leases of a
slot's worth (1/60 of the rate) and spends them locally for at most one slot, so at 5,000/s a
single-message request reads and writes the cache table once in 83 requests, not every time (the
table costs 3-4 queries per visit). What a lease leaves unspent is lost when it expires: each
web process may hold back at most 1/60 of a user's budget, never admit more than the rate plus
one lease."""

import math
import threading
import time

from django.core.cache import caches
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

from scheduling.config.conf import conf, setting_name
from scheduling.core.text import has_nul
from scheduling.models import ApiKey, Team

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


class _Groups:
    """Users' group names, read at most once a minute per user and process (DELAY_API_RATE_GROUPS
    only): a group change takes up to a minute to apply."""

    lock = threading.Lock()
    of: dict[int, tuple[frozenset[str], float]] = {}
    SECONDS = 60.0

    @classmethod
    def names(cls, user) -> frozenset[str]:
        now = time.monotonic()
        with cls.lock:
            names, until = cls.of.get(user.pk, (frozenset(), 0.0))
        if now < until:
            return names
        names = frozenset(user.groups.values_list("name", flat=True))
        with cls.lock:
            if len(cls.of) > 10_000:
                cls.of = {pk: v for pk, v in cls.of.items() if v[1] > now}
            cls.of[user.pk] = (names, now + cls.SECONDS)
        return names


def _per_second(rate: str | None) -> float:
    if rate is None:
        return math.inf
    n, period = rate.split("/")
    return int(n) / {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]


def rate_of(user) -> str | None:
    """The user's rate: the lowest of the DELAY_API_RATE_GROUPS they are in, else DELAY_API_RATE."""
    groups = conf().api_rate_groups
    if groups and user is not None and user.is_authenticated and user.pk is not None:
        rates = [rate for name, rate in groups.items() if name in _Groups.names(user)]
        if rates:
            return min(rates, key=_per_second)
    return conf().api_rate


class _Leases:
    """This process's unspent leases: cache key -> (tokens left, usable until)."""

    lock = threading.Lock()
    left: dict[str, tuple[int, float]] = {}


class ItemRateThrottle(SimpleRateThrottle):
    scope = "api"
    cache_format = "dp:throttle:%(scope)s:%(ident)s"

    def get_rate(self):
        return conf().api_rate  # None: off

    @property
    def cache(self):
        return caches["throttle"]

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.ident(request)}

    def ident(self, request) -> str:
        """Whom the budget is of: the user, or a team's key (which is nobody's account)."""
        user = request.user
        if isinstance(request.auth, ApiKey) and user.pk is None:
            return f"key-{request.auth.pk}"
        return str(user.pk) if user and user.is_authenticated else self.get_ident(request)

    def rate_for(self, request) -> str | None:
        return rate_of(request.user)

    def allow_request(self, request, view):
        self.rate = self.rate_for(request)
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.key = self.get_cache_key(request, view)
        self.now = self.timer()
        self.cost = request_cost(request, view)
        lease_key = f"{self.key}:{self.rate}"
        with _Leases.lock:
            tokens, until = _Leases.left.get(lease_key, (0, 0.0))
            if tokens >= self.cost and self.now < until:
                _Leases.left[lease_key] = (tokens - self.cost, until)
                return True
        return self._take_lease(lease_key)

    def _take_lease(self, lease_key: str) -> bool:
        """From the shared history: the request's cost, and what of a slot's worth fits beside it."""
        width = self.duration / SLOTS
        self.history = [(at, n) for at, n in self.cache.get(self.key, []) if at > self.now - self.duration]
        used = sum(n for _, n in self.history)
        if self.cost > self.num_requests:
            raise Throttled(detail=(
                f"{self.cost:,} messages at once are more than the rate limit allows in a whole "
                f"{PERIODS[self.rate.split('/')[1][0]]} ({self.num_requests:,}, {setting_name('api_rate')}); "
                "send fewer at once"))
        if used + self.cost > self.num_requests:
            self.excess = used + self.cost - self.num_requests
            return False
        taken = max(self.cost, min(math.ceil(self.num_requests / SLOTS), self.num_requests - used))
        slot = math.ceil(self.now / width) * width
        if self.history and self.history[0][0] == slot:
            self.history[0] = (slot, self.history[0][1] + taken)
        else:
            self.history.insert(0, (slot, taken))
        self.cache.set(self.key, self.history, self.duration + width)
        with _Leases.lock:
            if len(_Leases.left) > 10_000:  # one per user and rate: keep the live ones only
                _Leases.left = {k: v for k, v in _Leases.left.items() if v[1] > self.now}
            _Leases.left[lease_key] = (taken - self.cost, self.now + width)
        return True

    def wait(self) -> float:
        """Seconds until the oldest slots have expired enough for this request to fit."""
        freed = 0
        for at, n in reversed(self.history):  # oldest first
            freed += n
            if freed >= self.excess:
                return max(at + self.duration - self.now, 0.001)
        return self.duration


class TeamRateThrottle(ItemRateThrottle):
    """A whole team's budget (its Team.api_rate, else DELAY_TEAM_API_RATE), charged to the team a
    request acts in, whoever makes it (a team's key, a person's key or session): the team it names
    (``?team=`` or a ``team`` field), else the team of the object it addresses (a detail route) or
    of the endpoints it names (scheduling), else the person's teams (one, or each of several: a
    request that reads across them is charged to each). A person in two teams is never charged to
    none. An operator is charged only to a team they name: they act across teams."""

    scope = "team"

    def allow_request(self, request, view):
        for team in self._teams(request, view):
            self._current = team
            if not super().allow_request(request, view):
                return False
        return True

    def _teams(self, request, view) -> list[Team]:
        if not hasattr(request, "_dp_rate_teams"):
            request._dp_rate_teams = self._find_teams(request, view)
        return request._dp_rate_teams

    @staticmethod
    def _find_teams(request, view) -> list[Team]:
        from scheduling.api.callers import request_caller, request_team_name

        key = request.auth if isinstance(request.auth, ApiKey) else None
        if key is not None and key.team_id:
            return [key.team]
        caller = request_caller(request)
        several = not caller.operator and len(caller.member_of) > 1
        if several and request.method in ("POST", "PATCH", "PUT"):
            request.data  # noqa: B018  (parsed now: a team named in the body counts, request_team_name)
        name = request_team_name(request)
        if name:
            if has_nul(name):
                return []
            teams = Team.objects.filter(name=name)
            return list(teams if caller.operator else teams.filter(id__in=caller.member_of))
        if caller.operator or not caller.member_of:
            return []
        ids = set(caller.member_of)
        if several:
            ids = (_acting_team_ids(request, view) & ids) or ids
        return list(Team.objects.filter(id__in=ids).order_by("id"))

    def ident(self, request) -> str:
        return str(self._current.pk)

    def rate_for(self, request) -> str | None:
        return _team_rate(self._current.api_rate, conf().team_api_rate)


def _acting_team_ids(request, view) -> set[int]:
    """The teams a request of a person in several acts in, read before its handler runs: the
    team of the object a detail route addresses (the view's ``acting_team_ids``), or of the
    endpoints a body names (a message, a bulk's messages, a schedule). Empty: not known."""
    if getattr(view, "detail", False) and hasattr(view, "acting_team_ids"):
        return view.acting_team_ids()
    if request.method != "POST":
        return set()
    data = request.data
    items = data.get("messages") if isinstance(data, dict) and isinstance(data.get("messages"), list) else [data]
    names = {item["endpoint"] for item in items[:conf().bulk_max]
             if isinstance(item, dict) and isinstance(item.get("endpoint"), str) and not has_nul(item["endpoint"])}
    if not names:
        return set()
    from scheduling.models import Endpoint

    return set(Endpoint.objects.filter(name__in=names).values_list("team_id", flat=True).distinct())


class KeyRateThrottle(ItemRateThrottle):
    """Each key's budget (its team's key_api_rate, else DELAY_KEY_API_RATE)."""

    scope = "key"

    def ident(self, request) -> str:
        return str(request.auth.pk)

    def rate_for(self, request) -> str | None:
        key = request.auth if isinstance(request.auth, ApiKey) else None
        if key is None:
            return None
        own = key.team.key_api_rate if key.team_id else ""
        return _team_rate(own, conf().key_api_rate)


def _team_rate(own: str, default: str | None) -> str | None:
    """A team's own rate (text, checked when saved; "off": none) wins over the platform's."""
    from scheduling.config.parsers import ApiRate

    return ApiRate().parse(own, "rate") if own else default
