"""Lists as iterators: every page's items in turn, following the API's ``next`` links (cursor or
page number), fetched only as far as the caller reads."""

from __future__ import annotations

from dataclasses import replace

from ._transport import Call


def _page(data) -> tuple[list, str | None]:
    if isinstance(data, dict):
        return data.get("results") or [], data.get("next")
    return data or [], None  # a short list the API answers whole (a team's members)


class Pages:
    def __init__(self, send, call: Call, model):
        self._send, self._call, self._model = send, replace(call, parse=None), model

    def __iter__(self):
        call = self._call
        while call is not None:
            items, link = _page(self._send(call))
            yield from (self._model.from_api(item) for item in items)
            call = Call("GET", link, idempotent=True) if link else None

    def first(self, n: int) -> list:
        """The first ``n`` items (fetching only the pages they are on)."""
        found: list = []
        for item in self:
            if len(found) >= n:
                break
            found.append(item)
        return found


class AsyncPages:
    def __init__(self, send, call: Call, model):
        self._send, self._call, self._model = send, replace(call, parse=None), model

    async def __aiter__(self):
        call = self._call
        while call is not None:
            items, link = _page(await self._send(call))
            for item in items:
                yield self._model.from_api(item)
            call = Call("GET", link, idempotent=True) if link else None

    async def first(self, n: int) -> list:
        found: list = []
        async for item in self:
            if len(found) >= n:
                break
            found.append(item)
        return found
