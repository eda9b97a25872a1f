"""Re-seal every endpoint's webhook secrets with the first key of DELAY_SECRETS_KEYS (the middle
step of a key rotation: docs/security.md#webhook-secrets-at-rest)."""

from django.core.management.base import CommandError

from scheduling.config.conf import conf, setting_name
from scheduling.endpoints.secrets import endpoint_reseal_secrets
from scheduling.management.commands._base import PlatformCommand
from scheduling.management.commands._progress import progress_bar
from scheduling.security.secret_box import SealedWithUnknownKey


class Command(PlatformCommand):
    audit_runs = True  # one audit row for the run, with its options
    help = (
        f"Re-seal every endpoint's webhook secrets with the first key of {setting_name('secrets_keys')} (and seal "
        "any still in clear); idempotent. Rotation: put the new key first, run this, then drop the old key."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=500, help="endpoints per transaction (default 500)")

    def handle(self, *args, batch, **options):
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        name = setting_name("secrets_keys")
        try:
            with progress_bar(self.stdout, "endpoints", None) as update:
                result = endpoint_reseal_secrets(batch_size=batch,
                                                 progress=lambda r: update(r.done, of=r.total))
        except SealedWithUnknownKey as exc:
            raise CommandError(f"rotate_secrets_key stopped (batches before it are done; run it again once "
                               f"fixed): {exc}") from None
        key = f"the first key of {name}" if conf().secrets_keys else f"the key derived from SECRET_KEY ({name} unset)"
        self.stdout.write(f"Re-sealed the secrets of {result.resealed} of {result.total} endpoint(s) with {key}; "
                          f"the others had it already.")
