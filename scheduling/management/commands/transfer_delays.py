"""Blue-green broker upgrade: shovel every delayed message to another broker with its
remaining delay (a plain shovel would restart each delay from the top of its level)."""

from django.core.management.base import BaseCommand, CommandError

from topology import broker as topology_broker
from topology import cascade
from topology.broker import TopologyConflict

from ... import broker
from ...models import Endpoint
from ...selectors import topology_version_default, topology_version_get
from ._moving import run_move


class Command(BaseCommand):
    help = (
        "Move delayed messages of a version from this broker (BROKER_URL) to another one, "
        "provisioning the cascade and endpoint queues there first: "
        "transfer_delays --to-broker amqp://user:pw@green:5672/ [--version v2] [--dry-run]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--to-broker", required=True, metavar="URL", help="AMQP URL of the target broker")
        parser.add_argument("--version", dest="version_name", help="topology version (default: the default, v2)")
        parser.add_argument("--dry-run", action="store_true", help="count what would move; move nothing")
        parser.add_argument("--batch", type=int, default=500, help="messages per confirm round (default 500)")

    def create_parser(self, prog_name, subcommand, **kwargs):
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def handle(self, *args, to_broker, version_name, dry_run, batch, **options):
        row = topology_version_get(version_name) if version_name else topology_version_default()
        if row is None:
            raise CommandError(f"unknown topology version {version_name!r}")
        version = row.cascade
        if broker.describe(to_broker) == broker.describe():
            raise CommandError("--to-broker is the broker this platform already uses")
        try:
            with broker.connected() as source, broker.connected(to_broker) as target:
                if not dry_run:
                    topology_broker.declare_plan(target, cascade.cascade_plan(version))
                    names = list(Endpoint.objects.values_list("name", flat=True))
                    for name in names:
                        topology_broker.bind_endpoint(target, version.prefix, name)
                    self.stdout.write(
                        f"Provisioned {version.name} and {len(names)} endpoint queue(s) on {broker.describe(to_broker)}."
                    )
                run_move(self, source=source, target=target, source_version=version, target_version=version,
                         target_row=None, batch=batch, dry_run=dry_run,
                         label=f"{version.name} -> {broker.describe(to_broker)}")
        except (broker.BrokerUnavailable, TopologyConflict) as exc:
            raise CommandError(str(exc)) from None
