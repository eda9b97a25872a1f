"""provision_delays against the live broker (this run's vhost): declare, record, verify, export."""

import json
import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from harness.paths import ROOT
from scheduling.config.conf import broker
from scheduling.models import TopologyVersion
from topology import cascade

pytestmark = [pytest.mark.django_db, pytest.mark.broker]


def run(*args):
    out, err = StringIO(), StringIO()
    call_command("provision_delays", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def teardown(amqp):
    plans = []
    yield plans.append
    for plan in plans:
        amqp.teardown(plan)


def names_with(prefix):
    """Queues and exchanges under a prefix on the platform's broker (this module's vhost)."""
    management, vhost = broker().management, broker().vhost
    return [q["name"] for q in management.queues(vhost) if q["name"].startswith(prefix)] + [
        e["name"] for e in management.exchanges(vhost) if e["name"].startswith(prefix)
    ]


def test_provisions_the_platform_versions_and_records_it(provisioned, versions):
    # The platform's cascades are shared by this run's tests: provisioning again is a no-op.
    out, _ = run("--version", "all")
    assert "Provisioned v1 (dp., 28 levels)" in out and "Provisioned v2 (dp.v2., 28 levels)" in out
    assert "Provisioned v3 (dp.v3., 28 levels)" in out
    assert "31 exchanges, 29 queues, 86 bindings" in out and "31 exchanges, 29 queues, 29 bindings" in out
    assert TopologyVersion.objects.count() == 3 and all(v.provisioned_at for v in TopologyVersion.objects.all())
    out, _ = run("--verify", "--version", "all")
    assert "v1 (dp.): cascade complete" in out and "v2 (dp.v2.): cascade complete" in out
    assert "v3 (dp.v3.): cascade complete" in out
    v2 = TopologyVersion.objects.get(name="v2")
    assert v2.verified_at and v2.verify_problems == []


def test_verify_checks_the_broker_itself():
    """Version and feature flags from the management API, the dead-letter worker's confirm
    timeout with rabbitmqctl: the machine's node keeps the 180,000 ms default (a warning), the
    test processes' own nodes set 5,000 (harness/rabbit_node.py)."""
    import re

    out, _ = run("--verify", "--version", "v2")
    assert "broker: ok: RabbitMQ version: 3." in out
    assert "broker: ok: feature flag stream_queue: enabled" in out
    (mark, ms), = re.findall(r"broker: (\w+): dead_letter_worker_publisher_confirm_timeout on \S+: ([\d,]+) ms", out)
    assert mark == ("ok" if int(ms.replace(",", "")) <= 10_000 else "warning"), out


def test_verify_fails_naming_a_deleted_queue(amqp, teardown, unique_prefix):
    teardown(cascade.cascade_plan(cascade.V2.with_(prefix=unique_prefix, levels=4)))
    run("--version", "v2", "--prefix", unique_prefix, "--levels", "4")
    run("--verify", "--version", "v2", "--prefix", unique_prefix, "--levels", "4")
    amqp.delete_queue(f"{unique_prefix}delay-level-02")
    err = StringIO()
    with pytest.raises(CommandError, match="missing or mismatched"):
        call_command("provision_delays", "--verify", "--version", "v2", "--prefix", unique_prefix, "--levels", "4",
                     stderr=err, stdout=StringIO())
    problems = err.getvalue().splitlines()
    assert f"v2: missing queue {unique_prefix}delay-level-02" in problems
    # the queue's two bindings went with it
    assert any(f"-> queue {unique_prefix}delay-level-02" in p for p in problems)


def test_custom_prefix_is_not_recorded_as_the_platforms_version(teardown, unique_prefix):
    teardown(cascade.cascade_plan(cascade.V3.with_(prefix=unique_prefix, levels=3)))
    out, _ = run("--prefix", unique_prefix, "--levels", "3")
    assert "Provisioned v3" in out and "not recorded" in out
    assert not TopologyVersion.objects.filter(provisioned_at__isnull=False).exists()


def test_dry_run_prints_the_plan_and_declares_nothing(teardown, unique_prefix):
    out, _ = run("--dry-run", "--prefix", unique_prefix, "--levels", "4")
    assert f"queue    {unique_prefix}delay-level-03 x-dead-letter-exchange={unique_prefix}delay-level-02" in out
    assert "x-message-ttl=8000" in out and "Dry run: nothing was declared." in out
    assert names_with(unique_prefix) == []
    teardown(cascade.cascade_plan(cascade.V3.with_(prefix=unique_prefix, levels=4)))
    run("--prefix", unique_prefix, "--levels", "4")
    assert len(names_with(unique_prefix)) == 5 + 7  # the same run for real: 5 queues, 7 exchanges


def test_export_definitions_writes_json_without_touching_the_broker(tmp_path, unique_prefix):
    target = tmp_path / "defs.json"
    out, _ = run("--export-definitions", str(target), "--version", "v1", "--prefix", unique_prefix)
    definitions = json.loads(target.read_text())
    assert len(definitions["queues"]) == 29 and len(definitions["bindings"]) == 86
    assert "rabbitmqctl import_definitions" in out
    assert names_with(unique_prefix) == []


def test_conflicting_declaration_is_one_line(teardown, unique_prefix):
    teardown(cascade.cascade_plan(cascade.V2.with_(prefix=unique_prefix, levels=2)))
    run("--version", "v2", "--prefix", unique_prefix, "--levels", "2")
    with pytest.raises(CommandError, match=r"^inequivalent arg 'x-\S+' for queue"):
        run("--version", "v1", "--prefix", unique_prefix, "--levels", "2")


def test_prefix_with_all_versions_is_refused():
    with pytest.raises(CommandError, match="apply to one version"):
        run("--version", "all", "--prefix", "x.")


def test_unreachable_broker_exits_1_with_one_line_and_no_traceback():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "delayplatform.settings_test"}
    result = subprocess.run(
        [sys.executable, "manage.py", "provision_delays", "--broker", "amqp://guest:guest@127.0.0.1:1//"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "CommandError: cannot connect to RabbitMQ at amqp://guest:**@127.0.0.1:1//: [Errno 111] Connection refused"
    ]


def test_fresh_installs_default_to_v3():
    out, _ = run("--dry-run")
    assert out.startswith("v3: prefix dp.v3., 28 levels")
    assert "exchange dp.v3.delay-level-05 (direct) alternate-exchange=dp.v3.delay-level-04" in out
    assert "binding  dp.v3.delay-level-05 -> queue dp.v3.delay-level-05 key 'bit:05'" in out


def test_beside_nservicebus_it_succeeds_keeps_their_exchange_and_verify_warns(amqp, teardown, unique_prefix):
    """--prefix nsb.v2. --version v2 on a broker that already has NServiceBus's delivery exchange
    (declared without the alternate-exchange argument)."""
    prefix = f"{unique_prefix}nsb.v2."
    version = cascade.V2.with_(prefix=prefix, levels=3)
    teardown(cascade.cascade_plan(version))
    amqp.declare(cascade.Plan(version, (cascade.Exchange(f"{prefix}delay-delivery"),), (), ()))
    out, _ = run("--version", "v2", "--prefix", prefix, "--levels", "3")
    assert "Provisioned v2" in out
    assert f"exchange {prefix}delay-delivery already exists without alternate-exchange={prefix}delay-unroutable: " \
           "kept as it is: shared with another system" in out and "--verify says what it risks" in out
    delivery = next(e for e in broker().management.exchanges(broker().vhost) if e["name"] == f"{prefix}delay-delivery")
    assert delivery["arguments"] == {}
    out, _ = run("--verify", "--version", "v2", "--prefix", prefix, "--levels", "3")  # exit 0: a warning only
    assert f"v2: warning: exchange {prefix}delay-delivery has no alternate-exchange" in out
    assert "32 of them stall that level for every destination (NServiceBus.RabbitMQ#1407)" in out
    assert "cascade complete and as planned (1 warning(s) above)" in out


@pytest.mark.parametrize("default", ["v1", "v2", "v3"])
def test_without_version_the_setting_chooses(settings, default):
    settings.DELAY_DEFAULT_VERSION = default
    out, _ = run("--dry-run")
    assert out.startswith(f"{default}: prefix {cascade.get_version(default).prefix}, 28 levels")


def test_shards_are_planned_exported_declared_and_verified(settings, teardown, unique_prefix, tmp_path):
    settings.DELAY_SHARDS = "v3=2"
    version = cascade.V3.with_(prefix=unique_prefix, levels=4, shards=2)
    teardown(cascade.cascade_plan(version))
    out, _ = run("--dry-run", "--prefix", unique_prefix, "--levels", "4")
    assert out.startswith(f"v3: prefix {unique_prefix}, 4 levels, 2 shards, quorum queues")
    assert "12 exchanges, 9 queues, 9 bindings" in out
    assert f"queue    {unique_prefix}delay-level-03-s1 " in out
    assert f"x-dead-letter-exchange={unique_prefix}delay-level-02-s1" in out
    assert f"exchange {unique_prefix}delay-level-00-s1 (direct) alternate-exchange={unique_prefix}delay-delivery" in out
    assert names_with(unique_prefix) == []

    target = tmp_path / "defs.json"
    run("--export-definitions", str(target), "--prefix", unique_prefix, "--levels", "4")
    definitions = json.loads(target.read_text())
    assert {q["name"] for q in definitions["queues"]} == {q.name for q in cascade.cascade_plan(version).queues}
    assert len(definitions["queues"]) == 9 and f"{unique_prefix}delay-ingest-s1" in {
        e["name"] for e in definitions["exchanges"]}

    out, _ = run("--prefix", unique_prefix, "--levels", "4")
    assert f"Provisioned v3 ({unique_prefix}, 4 levels, 2 shards) on " in out
    assert "12 exchanges, 9 queues, 9 bindings" in out
    assert len(names_with(unique_prefix)) == 9 + 12
    out, _ = run("--verify", "--prefix", unique_prefix, "--levels", "4")
    assert f"v3 ({unique_prefix}, 2 shards): cascade complete and as planned" in out
    (node,) = [n["name"] for n in broker().management.nodes() if n.get("running")]
    assert f"v3: quorum leaders: {node} 9" in out.splitlines()

    settings.DELAY_SHARDS = ""  # lowered to one shard: shard 1 stays, verify warns and still exits 0
    out, _ = run("--verify", "--prefix", unique_prefix, "--levels", "4")
    assert "v3: warning: shard 1 is beyond the 1 shard(s) configured and still exists (4 queue(s), " \
           "5 exchange(s) named *-s1) holding" in out
    assert "cascade complete and as planned (1 warning(s) above)" in out
    run("--prefix", unique_prefix, "--levels", "4")
    assert len(names_with(unique_prefix)) == 9 + 12  # provisioning one shard deleted nothing


def test_verify_names_a_quorum_queue_short_of_a_running_node(settings, teardown, unique_prefix, monkeypatch):
    """The replication check fails when a quorum queue lacks a member on a running node: here
    the cluster answers with a second running node that no queue lists among its members."""
    from rabbit import Management

    version = cascade.V2.with_(prefix=unique_prefix, levels=2)
    teardown(cascade.cascade_plan(version))
    run("--version", "v2", "--prefix", unique_prefix, "--levels", "2")
    real_nodes = Management.nodes
    monkeypatch.setattr(Management, "nodes", lambda self: [*real_nodes(self), {"name": "dpc9@elsewhere",
                                                                               "running": True}])
    err = StringIO()
    with pytest.raises(CommandError, match=r"^3 quorum queue\(s\) not replicated to every running node"):
        call_command("provision_delays", "--verify", "--version", "v2", "--prefix", unique_prefix, "--levels", "2",
                     stderr=err, stdout=StringIO())
    problems = err.getvalue().splitlines()
    assert len(problems) == 3 and all("for 2 running node(s): not replicated to dpc9@elsewhere" in p
                                      for p in problems)
    assert problems[0].startswith(f"v2: quorum queue {unique_prefix}delay-level-01 has 1 member(s) (")
