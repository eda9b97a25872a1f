"""Debounce (issue 49): five nullable columns without a default on the messages (adding them
rewrites nothing, and the previous release's INSERTs, which do not name them, leave them NULL; the
status ``superseded`` came with 0030), and two partial indexes that
rows without a debounce key never enter, built CONCURRENTLY: the migration is not atomic, each step
commits on its own and is safe to repeat after an interruption (an index left INVALID by an
interrupted build is dropped and built again by hand: docs/operations/upgrades.md)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('scheduling', '0030_message_expiry'),
    ]

    operations = [
        migrations.AddField(
            model_name='scheduledmessage',
            name='debounce_key',
            field=models.CharField(blank=True, editable=False, help_text='its debounce key (per endpoint)',
                                   max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='debounce_max_seconds',
            field=models.IntegerField(blank=True, editable=False,
                                      help_text="trailing: never later than this after the window's first", null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='debounce_mode',
            field=models.CharField(blank=True, editable=False, help_text='trailing or leading', max_length=8,
                                   null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='debounce_seconds',
            field=models.IntegerField(blank=True, editable=False,
                                      help_text='trailing: due this long after the newest; leading: the window',
                                      null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='debounce_until',
            field=models.DateTimeField(blank=True, editable=False,
                                       help_text="trailing: the window's cap; leading: the window's end", null=True),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('debounce_key__isnull', False),
                                                  ('status__in', ['pending', 'published'])),
                               fields=['endpoint', 'debounce_key'], name='message_debounce_waiting'),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('debounce_mode', 'leading')),
                               fields=['endpoint', 'debounce_key', 'debounce_until'], name='message_debounce_leading'),
        ),
    ]
