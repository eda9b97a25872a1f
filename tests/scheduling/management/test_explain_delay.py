"""explain_delay prints the seeds' example table and refuses bad input in one line."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.topology.test_explain import SEED_TABLE, V3_TABLE
from topology.explain import DIRECT_HEADERS

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("explain_delay", *args, stdout=out)
    return out.getvalue()


def table_rows(text: str) -> list[tuple[str, ...]]:
    lines = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines]


def test_four_levels_reproduce_the_seed_example():
    text = run("10", "destination", "--version", "v2", "--levels", "4")
    assert table_rows(text) == SEED_TABLE
    assert "published to dp.v2.delay-level-03 with routing key 1.0.1.0.destination" in text


def test_v3_its_own_table_by_default():
    text = run("10", "a.b", "--levels", "4")
    assert [cell.strip() for cell in text.splitlines()[0].strip("|").split("|")] == list(DIRECT_HEADERS)
    assert table_rows(text) == V3_TABLE
    assert "v3 (4 levels): published to dp.v3.delay-level-03 with routing key a.b and CC bit:03, bit:01; " \
           "time in queues 10 seconds." in text


def test_28_levels_and_v1_names():
    text = run("10", "destination", "--version", "v1")
    assert "published to dp.delay-level-03 with routing key " + "0." * 24 + "1.0.1.0.destination" in text
    assert [row[0] for row in table_rows(text)] == ["Level 03", "Level 02", "Level 01", "Level 00", "Delivery Exchange"]


def test_fraction_is_explained_as_held_by_the_consumer():
    text = run("2.5", "billing")
    assert [row[0] for row in table_rows(text)] == ["Level 01", "Level 00", "Delivery Exchange"]
    assert "remaining 0.5s is held by the consumer" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("268435456", "x"), "over the maximum of 268435455"),
        (("-1", "x"), "must not be negative"),
        (("ten", "x"), "SECONDS must be a number"),
        (("5", "a..b"), "letters, digits"),
        (("5", "a.b", "--version", "v2"), "has dots: v2 routes by topic keys"),
        (("5", "x", "--levels", "0"), "levels must be"),
    ],
)
def test_bad_input_is_one_clear_error(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


ON_SHARD_2 = "00000000-0000-0000-0000-000000000005"  # 5 % 3


def test_a_sharded_version_explains_the_shard_of_an_id(settings):
    settings.DELAY_SHARDS = "v3=3"
    text = run("10", "a.b", "--levels", "4", "--id", ON_SHARD_2)
    assert [row[0] for row in table_rows(text)] == ["Level 03, shard 2", "Level 02, shard 2", "Level 01, shard 2",
                                                    "Level 00, shard 2", "Delivery Exchange"]
    assert "published to dp.v3.delay-level-03-s2 with routing key a.b and CC bit:03, bit:01" in text
    assert f"v3 has 3 shards: message {ON_SHARD_2} travels on shard 2." in text
    assert "On shard 2 it waits in dp.v3.delay-level-03-s2 (8 seconds), dp.v3.delay-level-01-s2 (2 seconds), " \
           "10 seconds in all; then dp.v3.delay-delivery -> a.b." in text


def test_without_an_id_shard_zero_and_how_the_shard_is_chosen(settings):
    settings.DELAY_SHARDS = "v3=3"
    text = run("10", "a.b", "--levels", "4")
    assert table_rows(text) == V3_TABLE  # shard 0: today's names
    assert "v3 has 3 shards; this is shard 0's path. Each message travels on the shard its id picks " \
           "(its UUID modulo 3): give --id <uuid> to see a message's." in text


def test_one_shard_explains_as_before_and_says_so_for_an_id():
    plain = run("10", "destination", "--version", "v2", "--levels", "4")
    assert "shard" not in plain
    text = run("10", "destination", "--version", "v2", "--levels", "4", "--id", ON_SHARD_2)
    assert table_rows(text) == SEED_TABLE
    assert f"v2 has one shard: message {ON_SHARD_2} travels on it." in text


@pytest.mark.parametrize(("version", "on", "said"), [("v3", True, True), ("v3", False, False), ("v2", True, False)])
def test_envelopes_are_explained_where_they_are_used(settings, version, on, said):
    settings.DELAY_ENVELOPES = on
    text = run("10", "billing", "--version", version)
    assert ("messages to billing that the relay publishes together and that fall due in the same second take this "
            "path as one broker message" in text) is said
