"""Reads that stay flat as history grows (docs/operations/performance.md, "History").

- (endpoint, status) becomes two partial indexes on (endpoint, status, topology, created_at, id):
  one of the messages in flight (scheduling writes only this one), one of the finished ones (an
  entry per message, written when it finishes): an endpoint's or a version's list is a merge of
  their ranges read index-only in (created_at, id) order instead of a sort of the endpoint's
  whole history, or a walk through every other endpoint's messages in flight;
- due_at of the messages in flight (overdue, due soon) and created_at of those scheduled in the
  past: partial indexes that hold in-flight and backdated rows only;
- multivariate statistics on (endpoint, status): estimates of an endpoint's counts per status;
- DeliveryMinute: deliveries per minute and lateness bucket, written by the delivery path.

The indexes are built CONCURRENTLY (a table of hundreds of millions of rows keeps taking writes
while they build), the new one before the old one is dropped; hence not atomic."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

STATISTICS = "message_endpoint_status_stats"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('scheduling', '0013_archive_and_finished_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='DeliveryMinute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('minute', models.DateTimeField()),
                ('shard', models.PositiveSmallIntegerField()),
                ('bucket_ms', models.BigIntegerField(help_text="the bucket's lower bound")),
                ('deliveries', models.BigIntegerField()),
                ('lateness_max_ms', models.BigIntegerField(help_text='the largest lateness counted in this row')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('minute', 'shard', 'bucket_ms'),
                                                        name='one_delivery_minute_row')],
            },
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'published'])),
                               fields=['endpoint', 'status', 'topology', 'created_at', 'id'], name='message_endpoint_in_flight'),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('status__in', ['cancelled', 'delivered', 'failed'])),
                               fields=['endpoint', 'status', 'topology', 'created_at', 'id'], name='message_endpoint_history'),
        ),
        RemoveIndexConcurrently(
            model_name='scheduledmessage',
            name='message_endpoint_status',
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'published'])), fields=['due_at'],
                               name='message_in_flight_due'),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('due_at__lt', models.F('created_at'))), fields=['created_at'],
                               name='message_in_past_created'),
        ),
        migrations.RunSQL(
            f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (mcv) ON endpoint_id, status "
            "FROM scheduling_scheduledmessage; ANALYZE scheduling_scheduledmessage",
            f"DROP STATISTICS IF EXISTS {STATISTICS}",
        ),
    ]
