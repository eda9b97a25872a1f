"""Ordering keys (issue 49): two nullable columns without a default on the messages (adding them
rewrites nothing; the previous release's INSERTs leave them NULL: no key), the status ``waiting``
(choices only: no database change), a new small table of turns (one row per endpoint and key, what
the hand-overs of a key lock), and two partial indexes that rows without a key (or not waiting)
never enter, built CONCURRENTLY: the migration is not atomic, each step commits on its own
(an index left INVALID by an interrupted build is dropped and built again: docs/operations/upgrades.md)."""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('scheduling', '0033_schedule_policies'),
    ]

    operations = [
        migrations.CreateModel(
            name='OrderingTurn',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=200)),
                ('holder_id', models.UUIDField(blank=True, null=True)),
                ('holder_until', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('endpoint', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                               related_name='+', to='scheduling.endpoint')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('holder_id__isnull', False)), fields=['holder_until'],
                                         name='ordering_turn_held')],
                'constraints': [models.UniqueConstraint(fields=('endpoint', 'key'), name='ordering_turn_key')],
            },
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='ordering_key',
            field=models.CharField(blank=True, editable=False,
                                   help_text="handed over one at a time, in due order, with the endpoint's other "
                                             "messages of this key", max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='waiting_since',
            field=models.DateTimeField(blank=True, editable=False,
                                       help_text="when it first waited for its ordering key's turn", null=True),
        ),
        migrations.AlterField(
            model_name='scheduledmessage',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('published', 'Published'),
                                            ('delivered', 'Delivered'), ('cancelled', 'Cancelled'),
                                            ('failed', 'Failed'), ('expired', 'Expired'),
                                            ('superseded', 'Superseded'), ('waiting', 'Waiting')],
                                   default='pending', max_length=16),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('ordering_key__isnull', False),
                                                  ('status__in', ['pending', 'published', 'waiting'])),
                               fields=['endpoint', 'ordering_key', 'due_at', 'created_at', 'id'],
                               name='message_ordering'),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('status', 'waiting')), fields=['endpoint', 'ordering_key'],
                               include=('payload_bytes',), name='message_waiting'),
        ),
    ]
