"""The prune deletes the orphan copies not seen for DELAY_ORPHAN_COPY_RETENTION (last seen: a copy
handed over again stays), in batches of DELAY_PRUNE_BATCH, and keeps every other; a dry run counts
them and deletes none; the command says how many went; a second run finds none."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.delivery.orphans import Carried, orphan_copy_set_aside
from scheduling.models import OrphanCopy
from scheduling.retention.services import message_prune

pytestmark = pytest.mark.django_db


@pytest.fixture
def aged(settings, tmp_path):
    """Copies last seen 45, 31 and 30 days + 1 minute ago (they go), and 29 days, 1 hour and now
    (they stay), on two queues; retention 30 days, batches of 2. (old ids, young ids)"""
    settings.ACCURACY_REPORT_DIR = tmp_path
    settings.DELAY_ORPHAN_COPY_RETENTION = timedelta(days=30)
    settings.DELAY_PRUNE_BATCH = 2
    now = timezone.now()
    ages = {"go": [timedelta(days=45), timedelta(days=31), timedelta(days=30, minutes=1), timedelta(days=40),
                   timedelta(days=33)],
            "stay": [timedelta(days=29), timedelta(hours=1), timedelta(0)]}
    ids = {kind: [str(uuid.uuid4()) for _ in ages[kind]] for kind in ages}
    for kind in ages:
        for n, (message_id, age) in enumerate(zip(ids[kind], ages[kind])):
            orphan_copy_set_aside(copies=[Carried(message_id, 0, f"t--q{n % 2}", 1_900_000_000_000)])
            OrphanCopy.objects.filter(message_id=message_id).update(first_seen_at=now - age - timedelta(days=5),
                                                                   last_seen_at=now - age)
    return now, ids["go"], ids["stay"]


def test_the_prune_deletes_exactly_the_copies_past_their_retention_in_batches(aged, caplog):
    now, old, young = aged
    with caplog.at_level("INFO", "scheduling.retention.table_prunes"):
        result = message_prune(now=now)
    assert (result.orphan_copy_candidates, result.orphan_copies_deleted) == (5, 5)
    assert sorted(OrphanCopy.objects.values_list("message_id", flat=True)) == sorted(young)
    batches = [r.getMessage() for r in caplog.records if "orphan copies" in r.getMessage()]
    assert [line.split()[1] for line in batches] == ["2", "2", "1"]  # DELAY_PRUNE_BATCH a transaction
    again = message_prune(now=now)
    assert (again.orphan_copy_candidates, again.orphan_copies_deleted) == (0, 0)
    assert OrphanCopy.objects.count() == 3


def test_a_copy_seen_again_stays_its_retention_from_then(aged):
    now, old, young = aged
    OrphanCopy.objects.filter(message_id=old[0]).update(last_seen_at=now - timedelta(days=2))  # handed over again
    assert message_prune(now=now).orphan_copies_deleted == 4
    assert sorted(OrphanCopy.objects.values_list("message_id", flat=True)) == sorted([old[0], *young])


def test_a_dry_run_counts_them_and_deletes_none(aged):
    now, old, young = aged
    result = message_prune(now=now, dry_run=True)
    assert (result.orphan_copy_candidates, result.orphan_copies_deleted) == (5, 0)
    assert OrphanCopy.objects.count() == 8


def test_the_command_says_how_many_went(aged, prune_command_says):
    prune_command_says(dry_run="dry run (orphan copies, not seen for 30d): 5 would be deleted (not archived)",
                       counted=["orphans", "5"], progress="pruning orphan copies")
    assert OrphanCopy.objects.count() == 3
