"""Expand only: the W3C traceparent a message was scheduled under (docs/observability/tracing.md), a
nullable column with no default: PostgreSQL adds it to the catalogue alone, no rewrite and no scan of
the messages' table. The previous release neither reads nor writes it (its COPY names its own
columns), so it keeps running during and after this migration."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0025_invitations_and_key_parents'),
    ]

    operations = [
        migrations.AddField(
            model_name='scheduledmessage',
            name='traceparent',
            field=models.CharField(blank=True, editable=False, help_text='the W3C traceparent it was scheduled under, carried to its delivery', max_length=55, null=True),
        ),
    ]
