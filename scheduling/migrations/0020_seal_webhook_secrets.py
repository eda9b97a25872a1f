"""Webhook signing secrets encrypted at rest: every secret stored in clear (``whsec_...``) is
sealed with the first key of DELAY_SECRETS_KEYS (security/secret_box.py), so neither column holds
a usable secret any more. Rows a process older than this writes in clear meanwhile (a rolling
upgrade) still sign, as they are; ``manage.py rotate_secrets_key`` seals them.

The reverse opens them again (for the code before, which signs with what the row holds); it needs
the keys that sealed them."""

from django.db import migrations

FIELDS = ("webhook_secret", "webhook_secret_previous")
BATCH = 500


def _each_batch(apps):
    Endpoint = apps.get_model("scheduling", "Endpoint")
    rows = Endpoint.objects.only("pk", *FIELDS).order_by("pk")
    batch = []
    for row in rows.iterator(chunk_size=BATCH):
        batch.append(row)
        if len(batch) == BATCH:
            yield Endpoint, batch
            batch = []
    if batch:
        yield Endpoint, batch


def _convert(apps, change) -> None:
    """``change(value)``: the value to store instead, or None to keep it."""
    for Endpoint, rows in _each_batch(apps):
        changed = []
        for row in rows:
            new = {field: change(getattr(row, field)) for field in FIELDS}
            new = {field: value for field, value in new.items() if value is not None}
            for field, value in new.items():
                setattr(row, field, value)
            if new:
                changed.append(row)
        Endpoint.objects.bulk_update(changed, FIELDS)


def seal_secrets(apps, schema_editor):
    from scheduling.security import secret_box

    _convert(apps, lambda value: secret_box.seal(value) if value and not secret_box.is_sealed(value) else None)


def open_secrets(apps, schema_editor):
    from scheduling.security import secret_box

    _convert(apps, lambda value: secret_box.open(value) if secret_box.is_sealed(value) else None)


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0019_teams"),
    ]

    operations = [
        migrations.RunPython(seal_secrets, open_secrets, elidable=False),
    ]
