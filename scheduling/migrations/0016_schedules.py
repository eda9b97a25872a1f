"""Recurring schedules (issue 24), the schedule a message is a run of, and a message's earlier
due times (reschedule). The messages table gains two nullable columns (no rewrite) and a partial
index over the runs only, built CONCURRENTLY
(the table keeps taking writes); hence not atomic."""

import django.core.validators
import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('scheduling', '0015_autovacuum_for_churn'),
    ]

    operations = [
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=200, unique=True, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*$', "Use letters, digits, '-' and '_', in words joined by '.' or ':'.", code='invalid_key')])),
                ('payload', models.JSONField()),
                ('cron', models.CharField(blank=True, help_text='five fields: minute hour day month weekday', max_length=200)),
                ('timezone', models.CharField(default='UTC', help_text='IANA name the cron rule is read in', max_length=64)),
                ('interval_ms', models.BigIntegerField(blank=True, null=True)),
                ('anchor_at', models.DateTimeField(blank=True, help_text="an interval schedule's first run", null=True)),
                ('start_at', models.DateTimeField(blank=True, help_text='no run before this', null=True)),
                ('end_at', models.DateTimeField(blank=True, help_text='no run after this', null=True)),
                ('missed_runs', models.CharField(choices=[('skip', 'skip runs missed while the platform was down'), ('latest', 'run the latest missed run once, at once')], default='skip', max_length=8)),
                ('is_paused', models.BooleanField(default=False)),
                ('revision', models.PositiveIntegerField(default=1, help_text='raised when the rule or the payload changes')),
                ('next_run_at', models.DateTimeField(blank=True, help_text='the first run not created yet', null=True)),
                ('last_run_at', models.DateTimeField(blank=True, help_text='the last run created', null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['key'],
                'permissions': [('pause_schedule', 'Can pause and resume schedules')],
            },
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='schedule',
            field=models.CharField(blank=True, help_text='the recurring schedule whose run this is', max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='scheduledmessage',
            name='due_history',
            field=models.JSONField(blank=True, help_text='earlier due times, oldest first, each with when it was moved (reschedule)', null=True),
        ),
        AddIndexConcurrently(
            model_name='scheduledmessage',
            index=models.Index(condition=models.Q(('schedule__isnull', False)), fields=['schedule', 'status', 'created_at', 'id'], name='message_schedule_runs'),
        ),
        migrations.AddField(
            model_name='schedule',
            name='endpoint',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='schedules', to='scheduling.endpoint'),
        ),
        migrations.AddIndex(
            model_name='schedule',
            index=models.Index(condition=models.Q(('is_paused', False), ('next_run_at__isnull', False)), fields=['next_run_at'], name='schedule_due'),
        ),
        migrations.AddConstraint(
            model_name='schedule',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('cron', ''), ('interval_ms__isnull', False)), models.Q(models.Q(('cron', ''), _negated=True), ('interval_ms__isnull', True)), _connector='OR'), name='schedule_cron_or_interval'),
        ),
    ]
