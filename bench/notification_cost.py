"""What telling outcomes costs the delivery path (issue 48): the set-based record of a batch of
record-only deliveries (delivery_receive_many, the loop's hot path), in ms per batch, when none of
its messages has a callback (what every batch pays now: one more column returned, no statement),
when a tenth has an on_delivered callback, and when all have (one query for the messages, one for
the endpoints, one COPY for the callbacks). A throwaway database (migrated, dropped at the end); no
broker: the callbacks' endpoint waits in the database (timeout manager), so nothing is published
after the commit and the figure is the delivery transaction's.

    .venv/bin/python -m bench.notification_cost [--batch 500] [--batches 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from datetime import timedelta

from harness.database import throwaway_database


def _measure(batch: int, batches: int) -> dict[str, list[float]]:
    import logging

    from django.utils import timezone

    from scheduling.delivery.services import delivery_receive_many
    from scheduling.models import DeliveryMode, Endpoint, ScheduledMessage, TopologyVersion
    from scheduling.teams.services import team_create

    logging.getLogger("scheduling.deliveries").setLevel(logging.WARNING)  # a line per batch otherwise
    version = TopologyVersion.objects.get(name="v3")
    team = team_create(name=f"bench-{uuid.uuid4().hex[:6]}")
    made = Endpoint.objects.create(name="orders", queue=f"{team.name}--orders", topology=version, handler="none",
                                   team=team)
    told = Endpoint.objects.create(name="outcomes", queue=f"{team.name}--outcomes", topology=version,
                                   handler="none", team=team, delivery_mode=DeliveryMode.TIMEOUT_MANAGER)
    figures: dict[str, list[float]] = {}
    for label, every in (("none", 0), ("a tenth", 10), ("all", 1)):
        for _ in range(batches):
            now = timezone.now()
            rows = [ScheduledMessage(endpoint=made, topology=version, payload={"n": n}, requested_delay_ms=0,
                                     due_at=now - timedelta(milliseconds=5), status="published", created_at=now,
                                     on_delivered=told if every and n % every == 0 else None)
                    for n in range(batch)]
            ScheduledMessage.objects.bulk_create(rows)
            started = time.perf_counter()
            outcomes = delivery_receive_many(items=[(str(r.id), 0) for r in rows], by="bench")
            figures.setdefault(label, []).append((time.perf_counter() - started) * 1000)
            assert all(o.result.value == "delivered" for o in outcomes)
        made_now = ScheduledMessage.objects.filter(endpoint=told).count()
        print(f"  {label}: {made_now:,} callbacks made so far", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    with throwaway_database(uuid.uuid4().hex[:8]) as url:
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "delayplatform.settings_test")
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        figures = _measure(args.batch, args.batches)
        from django.db import connections

        connections.close_all()
    print(f"batch of {args.batch} record-only deliveries, median of {args.batches} (ms per batch, µs per message):")
    for label, values in figures.items():
        median = statistics.median(values)
        print(f"  callbacks on {label:>8}: {median:7.2f} ms  {median * 1000 / args.batch:6.1f} µs")


if __name__ == "__main__":
    main()
