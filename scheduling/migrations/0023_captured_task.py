"""Expand only: a nullable column, no default and no rewrite. The previous release's INSERTs (which
do not name it) store NULL, read as "made before this column" (wire.legacy_captured), so the
previous release keeps working while and after this runs."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0022_webhook_engine'),
    ]

    operations = [
        migrations.AddField(
            model_name='scheduledmessage',
            name='captured_task',
            field=models.BooleanField(blank=True, editable=False, help_text='a Celery task message the platform captured (DelayedTask), published as captured', null=True),
        ),
    ]
