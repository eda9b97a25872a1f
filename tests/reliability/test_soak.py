"""`make soak` in three minutes (tests/reliability/soak/run.py): the platform as `make run` deploys it (gunicorn,
a worker with embedded beat, a RabbitMQ node and a PostgreSQL server of its own) under a steady
load through the API, with a share cancelled, retention in seconds so the prune archives and
deletes throughout, the worker SIGKILLed twice and RabbitMQ stopped and started once.
Judged over the table and the archive together: nothing lost, nothing early, every message in
exactly one place, and the table stops growing once pruning runs (its heap and its indexes, each
bounded across the vacuum cycles that ran over it)."""

import pytest

from tests.reliability.soak.rules import Plan, check
from tests.reliability.soak.run import run

pytestmark = [pytest.mark.reliability, pytest.mark.broker, pytest.mark.e2e]

# The hour's soak compressed: delays to 20 s (not 5 min), retention 10 s and a prune every 5 s (not 2
# and 1 min), autovacuum's period 10 s (not 60), a row every 15 s, 200 messages/s. Warm-up (twice
# 20 + 10 + 2 x 5 s) ends at the 1:30 row; the judged half is 1:45 to 3:00. The broker restart comes
# early (it takes 15-35 s here, a tenth of the run: its backlog belongs to the warm-up), a kill in
# each half. The table's plateau (tests/reliability/soak/plateau.py) is judged on its heap and its indexes apart,
# against the vacuum passes from the 1:30 row on: the soak's own VACUUM before 1:30 and 3:00, and
# autovacuum's (this table of ~5,000 live rows is vacuumed once 10,000 versions are dead, migration
# 0015: every 20-30 s at this rate). With the cycles that needs (2 for the heap, 3 for the indexes)
# a relation fails when the last cycles each ended on a new high, 25 % above the mark before them
# (a cycle here is ~20 s of load: without pruning, or with dead versions kept, it grows far more);
# with fewer (autovacuum held back on a busy machine) only the ceiling is judged, and the verdict
# says which. The ceiling: live rows, heap and indexes never above twice their size at 1:30 (the
# worst a run that lost nothing measured, on total size: +26 %; without pruning the live rows
# reach ~4x over the judged half).
PLAN = check(Plan(minutes=3, rate=200, max_delay_s=20, retention_s=10, prune_every_s=5, autovacuum_naptime_s=10,
                  restart_at_s=10, kills_at_s=(52.5, 127.5), table_tolerance=0.25))


def test_three_minute_soak_loses_nothing_and_the_table_plateaus():
    result = run(PLAN)
    final, targets = result.final, {name: (ok, evidence) for name, ok, evidence in result.verdict.targets}
    assert final.not_finished == 0, targets["0 lost"][1]
    assert final.early == 0, targets["0 early"][1]
    assert final.duplicates == 0 and final.unknown == 0, targets["every message once"][1]
    assert final.delivered_after_cancel == 0, targets["cancels honoured"][1]
    # the prune ran throughout: most messages were read back from the archive, not the table
    assert final.archived >= final.rows // 2, f"only {final.archived} of {final.rows} messages were archived"
    for name in ("live rows bounded", "table heap plateaus", "table indexes plateau"):
        assert targets[name][0], f"{name}: {targets[name][1]}"
