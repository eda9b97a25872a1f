"""Write the tables of every setting on docs/reference/configuration.md from the specs in
scheduling/config/specs.py, between the page's markers (the rest of the page is prose, kept
as it is), and conf()'s class in scheduling/config/conf.py (between its markers). ``--check`` changes nothing and fails if
either differs (tests/scheduling/config/test_conf.py checks the same)."""

from django.core.management.base import BaseCommand, CommandError

from scheduling.config import reference, specs


class Command(BaseCommand):
    help = ("Write the settings tables of docs/reference/configuration.md and conf()'s class in scheduling/config/conf.py from "
            "scheduling/config/specs.py")
    requires_system_checks = []  # a page of docs: no checks, no database

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file differs")

    def handle(self, *args, check, **options):
        for path, rewrite in ((reference.REFERENCE, reference.reference_page),
                              (reference.CONF, reference.conf_module)):
            self._write(path, rewrite, check)

    def _write(self, page, rewrite, check: bool) -> None:
        name = page.relative_to(specs.ROOT) if page.is_relative_to(specs.ROOT) else page
        text = page.read_text()
        try:
            fresh = rewrite(text)
        except ValueError as exc:
            raise CommandError(f"{name}: {exc}") from None
        if fresh == text:
            self.stdout.write(f"{name} is up to date")
        elif check:
            raise CommandError(f"{name} differs from scheduling/config/specs.py: run manage.py settings_reference")
        else:
            page.write_text(fresh)
            self.stdout.write(f"wrote {name}")
