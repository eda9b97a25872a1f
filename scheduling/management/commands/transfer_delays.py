"""Blue-green broker upgrade: shovel every delayed message to another broker with its
remaining delay (a plain shovel would restart each delay from the top of its level)."""

from django.core.management.base import CommandError

from rabbit import BrokerError
from scheduling.config.conf import broker, conf, setting_name
from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._moving import run_move
from scheduling.management.commands._versions import add_move_arguments
from scheduling.versions.selectors import topology_version_get
from scheduling.versions.services import endpoint_bind_all_on, topology_declare


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = (
        "Move delayed messages of a version from this broker (BROKER_URL) to another one, "
        "provisioning the cascade and endpoint queues there first: "
        "transfer_delays --to-broker amqp://user:pw@green:5672/ [--version v2] [--dry-run]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--to-broker", required=True, metavar="URL", help="AMQP URL of the target broker")
        parser.add_argument("--version", dest="version_name",
                            help=f"topology version (default: {setting_name('default_version')})")
        add_move_arguments(parser)

    def create_parser(self, prog_name, subcommand, **kwargs):
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def handle(self, *args, to_broker, version_name, dry_run, batch, **options):
        name = version_name or conf().default_version
        row = topology_version_get(name=name)
        if row is None:
            raise CommandError(f"unknown topology version {name!r}")
        version, source, target = row.cascade, broker(), broker(to_broker)
        if target.describe() == source.describe():
            raise CommandError("--to-broker is the broker this platform already uses")
        try:
            if not dry_run:
                with target.session() as session:
                    topology_declare(session=session, version=version)  # every shard
                bound = endpoint_bind_all_on(target=target, version=version)
                self.stdout.write(f"Provisioned {version.name} and {bound} endpoint queue(s) on {target.describe()}.")
        except BrokerError as exc:
            raise CommandError(str(exc)) from None
        run_move(self, source=source, target=target, source_version=version, target_version=version,
                 target_row=None, batch=batch, dry_run=dry_run, label=f"{version.name} -> {target.describe()}")
