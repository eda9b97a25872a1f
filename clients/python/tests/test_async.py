"""The async client: the same methods, awaited, against the real platform."""

import asyncio

from delayclient import AsyncClient, NotFound


def test_async_schedule_list_cancel(platform, endpoint):
    async def scenario():
        async with AsyncClient(platform.url, platform.key) as client:
            made = await asyncio.gather(*(client.messages.schedule(endpoint.name, {"i": i}, delay=600)
                                          for i in range(60)))
            listed = [m.id async for m in client.messages.list(endpoint=endpoint.name)]
            cancelled = await client.messages.cancel(made[0].id)
            first = await client.messages.list(endpoint=endpoint.name).first(3)
            try:
                await client.messages.get("00000000-0000-7000-8000-000000000000")
            except NotFound:
                missing = True
            return made, listed, cancelled, first, missing

    made, listed, cancelled, first, missing = asyncio.run(scenario())
    assert sorted(listed) == sorted(m.id for m in made) and len(listed) == 60
    assert cancelled.status == "cancelled" and len(first) == 3 and missing
