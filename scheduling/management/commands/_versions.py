"""Shared --version/--prefix/--levels handling: which cascade(s) a command works on."""

from django.core.management.base import CommandError
from django.db.utils import DatabaseError

from scheduling.config.conf import conf, configured_version, setting_name
from scheduling.management.commands._base import PlatformCommand
from scheduling.versions.selectors import topology_version_get
from topology import cascade


class VersionedCommand(PlatformCommand):
    """A command whose --version means the topology version, not Django's version."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)


def add_version_arguments(parser, *, allow_all: bool) -> None:
    choices = [*cascade.VERSIONS, "all"] if allow_all else list(cascade.VERSIONS)
    parser.add_argument(
        "--version", choices=choices, help=f"topology version (default: {setting_name('default_version')})"
    )
    parser.add_argument("--prefix", help="name prefix of exchanges and queues (default: the version's, e.g. dp.v2.)")
    parser.add_argument("--levels", type=int, help="number of delay levels (default 28)")


def _known(name: str) -> cascade.Version:
    """The version as the platform records it, or the built-in default without a database;
    with its configured shards either way."""
    try:
        row = topology_version_get(name=name)
    except DatabaseError:
        row = None
    return row.cascade if row else configured_version(name)


def resolve_versions(options) -> list[cascade.Version]:
    name = options.get("version") or conf().default_version
    names = list(cascade.VERSIONS) if name == "all" else [name]
    if name == "all" and (options.get("prefix") or options.get("levels")):
        raise CommandError("--prefix and --levels apply to one version: name it with --version")
    try:
        return [_known(n).with_(prefix=options.get("prefix"), levels=options.get("levels")) for n in names]
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def add_move_arguments(parser, *, batch: bool = True) -> None:
    """--dry-run (and --batch) of the commands that move delayed messages."""
    parser.add_argument("--dry-run", action="store_true", help="count what would move; move nothing")
    if batch:
        parser.add_argument("--batch", type=int, default=500, help="messages per confirm round (default 500)")
