"""Recurring schedules' overlap (issue 49): the schedule's policy and its count of runs skipped by it
(db_default: the previous release's INSERTs, which do not name them, still work; adding a column with
a constant default rewrites nothing), the policy copied on a run (nullable, no default), and the
status ``skipped`` (choices only; its rows are in message_endpoint_ended, whose condition 0030, not
yet released, was given it)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0034_message_ordering'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedule',
            name='overlap',
            field=models.CharField(choices=[('allow', 'allow'), ('skip', 'skip'), ('buffer_one', 'buffer_one')], db_default='allow', default='allow', help_text='a run due while the previous run has not ended: sent anyway (allow), not sent (skip), or waits for its end, one at most (buffer_one)', max_length=12),
        ),
        migrations.AddField(
            model_name='schedule',
            name='runs_overlap_skipped',
            field=models.BigIntegerField(db_default=0, default=0, editable=False, help_text='runs not sent because the previous run had not ended (its overlap policy)'),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='overlap',
            field=models.CharField(blank=True, editable=False, help_text="a schedule's run: what it does when the previous run has not ended", max_length=12, null=True),
        ),
        migrations.AlterField(
            model_name='scheduledmessage',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('published', 'Published'), ('delivered', 'Delivered'), ('cancelled', 'Cancelled'), ('failed', 'Failed'), ('expired', 'Expired'), ('superseded', 'Superseded'), ('waiting', 'Waiting'), ('skipped', 'Skipped')], default='pending', max_length=16),
        ),
    ]
