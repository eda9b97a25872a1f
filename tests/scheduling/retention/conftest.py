"""Fixtures of the retention tests: what ``prune_messages`` tells its operator."""

import pytest
from django.core.management import call_command


@pytest.fixture
def prune_command_says(capsys):
    """prune_command_says(dry_run=..., counted=[kind, count], progress=...): ``prune_messages
    --dry-run`` prints ``dry_run`` and deletes nothing; then ``prune_messages`` prints a line that
    starts with ``counted`` (the kind and how many went) and its progress bar's ``progress``."""

    def says(*, dry_run: str, counted: list[str], progress: str) -> None:
        call_command("prune_messages", "--dry-run")
        assert dry_run in capsys.readouterr().out
        call_command("prune_messages")
        captured = capsys.readouterr()
        assert any(line.split()[:2] == counted for line in captured.out.splitlines()), captured.out
        assert progress in captured.err

    return says
