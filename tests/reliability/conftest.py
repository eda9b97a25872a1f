"""Fault injection against the real services. Each scenario runs on a platform of its own (its
database, vhost or private RabbitMQ node, web server and worker), or of its module's scenarios,
each then on an endpoint of its own (test_broker_faults.py, test_destination_gone.py), reports its
counts, and the session prints them as one table (also artifacts/reliability.json).

Sizes: reduced by default (part of `make test`); RELIABILITY_FULL=1 (`make test-reliability`)
runs the sizes the issue names."""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass

import pytest

from harness.paths import ARTIFACTS

FULL = os.environ.get("RELIABILITY_FULL") == "1"


def size(full: int, reduced: int) -> int:
    return full if FULL else reduced


@dataclass
class Counts:
    scenario: str
    messages: int
    lost: int
    duplicates_to_handler: int
    duplicates_suppressed: int
    early: int
    worst_lateness_ms: int | None
    note: str = ""
    p99_lateness_ms: int | None = None  # nearest rank, as PostgreSQL's percentile_disc


_RESULTS: list[Counts] = []


@pytest.fixture
def report():
    def add(counts: Counts) -> Counts:
        _RESULTS.append(counts)
        print(f"\n{counts}")
        return counts

    return add


def pytest_sessionfinish(session, exitstatus):
    if not _RESULTS:
        return
    header = ("scenario", "messages", "lost", "dup. to handler", "dup. suppressed", "early", "lateness p99",
              "worst lateness")
    rows = [(c.scenario, c.messages, c.lost, c.duplicates_to_handler, c.duplicates_suppressed, c.early,
             *("-" if ms is None else f"{ms} ms" for ms in (c.p99_lateness_ms, c.worst_lateness_ms)))
            for c in _RESULTS]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    lines = [" | ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in (header, *rows)]
    print("\n\nReliability" + (" (full size)" if FULL else " (reduced size)") + ":\n" + "\n".join(lines))
    ARTIFACTS.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # under make test's parallel processes: one file each
    name = f"reliability-{worker}.json" if worker else "reliability.json"
    (ARTIFACTS / name).write_text(json.dumps([asdict(c) for c in _RESULTS], indent=2))


@pytest.fixture
def rng():
    return random.Random(int(os.environ.get("RELIABILITY_SEED", "7")))
