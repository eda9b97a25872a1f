"""Declare (or plan, export, verify) the delay cascade of a topology version, every shard."""

import json
import sys

from django.core.management.base import CommandError

from rabbit import BrokerError
from rabbit.redelivery import POLICY_NAME
from scheduling.config.conf import broker
from scheduling.management.commands._base import require_migrated
from scheduling.management.commands._versions import VersionedCommand, add_version_arguments, resolve_versions
from scheduling.teams.broker_users import team_broker_user_check
from scheduling.versions.broker import topology_check_broker
from scheduling.versions.services import topology_provision, topology_verify
from topology import cascade
from topology.definitions import plan_definitions


def _args(arguments) -> str:
    return " ".join(f"{k}={v}" for k, v in arguments)


def _shards(version: cascade.Version) -> str:
    return f", {version.shards} shards" if version.shards > 1 else ""


def describe_plan(plan: cascade.Plan) -> list[str]:
    v = plan.version
    lines = [
        f"{v.name}: prefix {v.prefix}, {v.levels} levels{_shards(v)}, {v.queue_kind} queues, max delay "
        f"{v.max_delay_ms // 1000} s — {len(plan.exchanges)} exchanges, {len(plan.queues)} queues, "
        f"{len(plan.bindings)} bindings"
    ]
    lines += [f"  exchange {e.name} ({e.type}) {_args(e.arguments)}".rstrip() for e in plan.exchanges]
    lines += [f"  queue    {q.name} {_args(q.arguments)}".rstrip() for q in plan.queues]
    lines += [
        f"  binding  {b.source} -> {b.destination_type} {b.destination} key {b.routing_key!r}"
        for b in plan.bindings
    ]
    return lines


class Command(VersionedCommand):
    help = (
        "Declare the delay cascade (TTL queue + dead-letter exchange per bit) on RabbitMQ. "
        "Idempotent; --dry-run prints the plan, --export-definitions writes definitions JSON, "
        "--verify checks what the broker has."
    )

    def add_arguments(self, parser):
        add_version_arguments(parser, allow_all=True)
        parser.add_argument("--dry-run", action="store_true", help="print the plan, declare nothing")
        parser.add_argument(
            "--export-definitions",
            metavar="FILE",
            help="write RabbitMQ definitions JSON ('-' for stdout) instead of declaring",
        )
        parser.add_argument("--verify", action="store_true", help="check the broker, declare nothing")
        parser.add_argument("--broker", metavar="URL", help="AMQP URL (default: BROKER_URL)")

    def handle(self, *args, **options):
        versions = resolve_versions(options)
        plans = [cascade.cascade_plan(v) for v in versions]
        url = options["broker"]
        if options["export_definitions"]:
            return self._export(plans, options["export_definitions"], broker(url).vhost)
        if options["dry_run"]:
            for plan in plans:
                self.stdout.write("\n".join(describe_plan(plan)))
            self.stdout.write("Dry run: nothing was declared.")
            return
        if url is None:  # the platform's broker: what is declared is recorded in the database
            require_migrated()
        try:
            if options["verify"]:
                return self._verify(versions, url)
            policy_said = False  # the vhost's one policy, put by each version's provisioning: said once
            for plan in plans:
                result = topology_provision(version=plan.version, url=url)
                self.stdout.write(
                    f"Provisioned {plan.version.name} ({plan.version.prefix}, {plan.version.levels} levels"
                    f"{_shards(plan.version)}) on "
                    f"{broker(url).describe()}: {len(plan.exchanges)} exchanges, {len(plan.queues)} queues, "
                    f"{len(plan.bindings)} bindings in {result.seconds:.2f} s"
                    + ("" if result.recorded else " (not recorded: not the platform's version)")
                )
                if result.redelivery_policy and not policy_said:
                    policy_said = True
                    self.stdout.write(f"  policy {POLICY_NAME} on vhost {broker(url).vhost}: RabbitMQ "
                                      f"{result.redelivery_policy} would drop a quorum queue's message handed back "
                                      "20 times; it keeps them")
                for line in result.kept:
                    self.stdout.write(f"  {line}: shared with another system (NServiceBus?); a message for a "
                                      "destination with no queue bound is not kept "
                                      f"in {cascade.unroutable_name(plan.version.prefix)} (--verify says what it risks)")
        except BrokerError as exc:
            raise CommandError(str(exc)) from None

    def _export(self, plans, target, vhost):
        definitions = plan_definitions(plans[0], vhost)
        for plan in plans[1:]:
            more = plan_definitions(plan, vhost)
            for key in ("exchanges", "queues", "bindings"):
                definitions[key] += more[key]
        text = json.dumps(definitions, indent=2) + "\n"
        if target == "-":
            sys.stdout.write(text)
            return
        try:
            with open(target, "w") as fh:
                fh.write(text)
        except OSError as exc:
            raise CommandError(f"cannot write {target}: {exc.strerror}") from None
        counts = {k: len(definitions[k]) for k in ("exchanges", "queues", "bindings")}
        self.stdout.write(
            f"Wrote {target} ({counts['exchanges']} exchanges, {counts['queues']} queues, "
            f"{counts['bindings']} bindings for vhost {vhost}); "
            f"import with: rabbitmqctl import_definitions {target}"
        )

    def _verify(self, versions, url):
        failed = replication = unmet = 0
        for requirement in topology_check_broker(quorum=any(v.queue_kind == "quorum" for v in versions), url=url):
            (self.stderr if requirement.failed else self.stdout).write(f"broker: {requirement.line()}")
            unmet += requirement.failed
        # a team's user reaching past its team (teams/broker_access.py): the platform's broker, whose teams these are
        users = team_broker_user_check() if url is None else []
        for problem in users:
            self.stderr.write(f"broker: FAIL: {problem}")
        for version in versions:
            result = topology_verify(version=version, url=url)
            for warning in result.warnings:
                self.stdout.write(f"{version.name}: warning: {warning}")
            self.stdout.write(f"{version.name}: {result.leaders}")
            replication += result.under_replicated
            if result.problems:
                failed += len(result.problems)
                for problem in result.problems:
                    self.stderr.write(f"{version.name}: {problem}")
            else:
                self.stdout.write(f"{version.name} ({version.prefix}{_shards(version)}): cascade complete and as planned"
                                  + (f" ({len(result.warnings)} warning(s) above)" if result.warnings else ""))
        reasons = [f"{unmet} broker requirement(s) unmet (fixes above)"] if unmet else []
        if users:
            reasons.append(f"{len(users)} team broker user problem(s): wider than the team's (fixes above)")
        if failed > replication:
            reasons.append(f"{failed - replication} missing or mismatched piece(s); run provision_delays to fix")
        if replication:
            reasons.append(f"{replication} quorum queue(s) not replicated to every running node or without a leader; "
                           "rabbitmq-queues grow <node> all adds a node's missing members")
        if reasons:
            raise CommandError("; ".join(reasons))
