"""Move every delayed message from one cascade version to another, with its remaining delay."""

from django.core.management.base import CommandError

from rabbit import BrokerError
from scheduling.config.conf import broker
from scheduling.core.lifecycle import Status
from scheduling.endpoints.services import endpoint_update
from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._moving import run_move
from scheduling.management.commands._versions import add_move_arguments
from scheduling.models import DeliveryMode, ScheduledMessage
from scheduling.versions.selectors import topology_version_get
from scheduling.versions.services import topology_provision


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = (
        "Drain the level queues of one version (highest level first) into another: "
        "migrate_delays --from v1 --to v2 [--dry-run] [--batch 500] [--switch-endpoints]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="source", required=True, help="version to drain, e.g. v1")
        parser.add_argument("--to", dest="target", required=True, help="version to move into, e.g. v2")
        parser.add_argument("--switch-endpoints", action="store_true",
                            help="also point endpoints on the old version at the new one (new messages)")
        add_move_arguments(parser)

    def handle(self, *args, source, target, dry_run, batch, switch_endpoints, **options):
        old, new = topology_version_get(name=source), topology_version_get(name=target)
        for name, row in ((source, old), (target, new)):
            if row is None:
                raise CommandError(f"unknown topology version {name!r}")
        if old.pk == new.pk:
            raise CommandError("--from and --to name the same version")
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        if not dry_run:
            try:
                topology_provision(version=new.cascade)  # idempotent; binds every endpoint on it
                if switch_endpoints:
                    for endpoint in old.endpoints.all():
                        endpoint_update(endpoint=endpoint, topology=new)
            except BrokerError as exc:
                raise CommandError(str(exc)) from None
            waiting = ScheduledMessage.objects.filter(
                status=Status.PENDING, topology=old, delivery_mode=DeliveryMode.NATIVE
            ).update(topology=new)
            if waiting:
                self.stdout.write(f"{waiting} message(s) not yet published will go to {new.name}.")
        run_move(self, source=broker(), target=broker(), source_version=old.cascade, target_version=new.cascade,
                 target_row=new, batch=batch, dry_run=dry_run, label=f"{old.name} -> {new.name}")
