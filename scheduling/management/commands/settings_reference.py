"""Write the tables of every setting on docs/reference/configuration.md from the specs in
scheduling/setting_specs.py, between the page's markers (the rest of the page is prose, kept
as it is), and conf()'s class in scheduling/conf.py (between its markers). ``--check`` changes nothing and fails if
either differs (tests/scheduling/test_conf.py checks the same)."""

from django.core.management.base import BaseCommand, CommandError

from ... import setting_specs


class Command(BaseCommand):
    help = ("Write the settings tables of docs/reference/configuration.md and conf()'s class in scheduling/conf.py from "
            "scheduling/setting_specs.py")
    requires_system_checks = []  # a page of docs: no checks, no database

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file differs")

    def handle(self, *args, check, **options):
        page = setting_specs.REFERENCE
        text = page.read_text()
        try:
            fresh = setting_specs.reference_page(text)
        except ValueError as exc:
            raise CommandError(f"{page.relative_to(setting_specs.ROOT)}: {exc}") from None
        self._write(page, text, fresh, check)
        module = setting_specs.CONF
        text = module.read_text()
        try:
            fresh = setting_specs.conf_module(text)
        except ValueError as exc:
            raise CommandError(f"{module.name}: {exc}") from None
        self._write(module, text, fresh, check)

    def _write(self, page, text: str, fresh: str, check: bool) -> None:
        name = page.relative_to(setting_specs.ROOT) if page.is_relative_to(setting_specs.ROOT) else page
        if fresh == text:
            self.stdout.write(f"{name} is up to date")
        elif check:
            raise CommandError(f"{name} differs from scheduling/setting_specs.py: run manage.py settings_reference")
        else:
            page.write_text(fresh)
            self.stdout.write(f"wrote {name}")
