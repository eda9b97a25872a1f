"""``Client`` and ``AsyncClient``: the same methods (resources.py), sent by httpx.

    from delayclient import Client

    with Client("https://delays.example.com", key=os.environ["DELAY_API_KEY"]) as client:
        message = client.messages.schedule("billing-reminders", {"invoice": 42}, delay=3600)
        for m in client.messages.list(endpoint="billing-reminders", status="pending"):
            ...

    async with AsyncClient(url, key=key) as client:
        message = await client.messages.schedule("billing-reminders", {"invoice": 42}, delay=3600)
        async for m in client.messages.list(status="failed"):
            ...
"""

from __future__ import annotations

import os

from ._pages import AsyncPages, Pages
from ._transport import AsyncTransport, Call, SyncTransport
from .resources import (
    RESOURCES,
    Audit,
    BulkActions,
    Endpoints,
    Events,
    Invitations,
    Keys,
    Messages,
    Notifications,
    Platform,
    Schedules,
    Subscriptions,
    Teams,
)

URL_ENV, KEY_ENV = "DELAY_PLATFORM_URL", "DELAY_PLATFORM_KEY"


def _from_env(base_url: str | None, key: str | None) -> tuple[str, str]:
    return base_url or os.environ.get(URL_ENV, ""), key or os.environ.get(KEY_ENV, "")


class _Resources:
    messages: Messages
    schedules: Schedules
    endpoints: Endpoints
    teams: Teams
    keys: Keys
    invitations: Invitations
    audit: Audit
    bulk_actions: BulkActions
    subscriptions: Subscriptions
    events: Events
    notifications: Notifications
    platform: Platform

    def _attach(self) -> None:
        for name, resource in RESOURCES.items():
            setattr(self, name, resource(self))


class Client(_Resources):
    """The platform's API. ``base_url`` and ``key`` default to the environment's
    ``DELAY_PLATFORM_URL`` and ``DELAY_PLATFORM_KEY``. ``timeout``: seconds (or an httpx.Timeout);
    ``retry``: a Retry policy (idempotent calls only); ``http``: an httpx.Client of your own."""

    def __init__(self, base_url: str | None = None, key: str | None = None, **options):
        self._transport = SyncTransport(*_from_env(base_url, key), **options)
        self.base_url = self._transport.base_url
        self._attach()

    def _send(self, call: Call):
        return self._transport.send(call)

    def _pages(self, call: Call, model) -> Pages:
        return Pages(self._send, call, model)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient(_Resources):
    """The same methods as Client, each awaited (lists: ``async for``)."""

    def __init__(self, base_url: str | None = None, key: str | None = None, **options):
        self._transport = AsyncTransport(*_from_env(base_url, key), **options)
        self.base_url = self._transport.base_url
        self._attach()

    def _send(self, call: Call):
        return self._transport.send(call)

    def _pages(self, call: Call, model) -> AsyncPages:
        return AsyncPages(self._send, call, model)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
