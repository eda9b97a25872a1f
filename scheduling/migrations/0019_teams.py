"""Teams (issue 34): every existing row and user goes into the team ``default``, so a one-team
deployment notices nothing:

- every endpoint keeps its queue (its name), so messages in flight arrive where they always did;
- every schedule, delivery minute and report row belongs to ``default``;
- every user who is not a superuser becomes a member of ``default``, with the role their model
  permissions amounted to (endpoints: admin; scheduling, cancelling or schedules: member; else
  viewer); superusers are the platform's operators;
- every DRF token becomes a legacy API key of its user: only its SHA-256 digest is kept, it still
  authenticates as ``Authorization: Token <key>``, and the plaintext table is emptied and dropped;
- the audit log refuses UPDATE, and DELETE unless the prune says it is pruning.

Tokens cannot be given back by the reverse migration (only digests are kept): reversing it keeps
the keys table and needs new tokens made."""

import hashlib
import re
from datetime import timedelta

import django.contrib.postgres.fields
import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

import scheduling.models.teams

DEFAULT = "default"
ADMIN_PERMISSIONS = {"add_endpoint", "change_endpoint"}
MEMBER_PERMISSIONS = {"add_scheduledmessage", "change_scheduledmessage", "cancel_scheduledmessage",
                      "republish_scheduledmessage", "add_schedule", "change_schedule", "pause_schedule"}
LEGACY_KEY_DAYS = 90  # DELAY_API_KEY_EXPIRES' default: a migrated token expires like a new key


def default_team(apps, schema_editor):
    """``default`` may run every task the platform allows (DELAY_CELERY_TASK_ALLOWLIST), as before."""
    apps.get_model("scheduling", "Team").objects.get_or_create(name=DEFAULT, defaults={"celery_task_allowlist": "*"})


def fill_teams(apps, schema_editor):
    """Every endpoint, schedule and delivery minute into ``default``; each endpoint's queue stays its name."""
    team = apps.get_model("scheduling", "Team").objects.get(name=DEFAULT)
    Endpoint = apps.get_model("scheduling", "Endpoint")
    Endpoint.objects.update(team=team, queue=models.F("name"))
    Schedule = apps.get_model("scheduling", "Schedule")
    Schedule.objects.update(team=team)
    apps.get_model("scheduling", "DeliveryMinute").objects.update(team=team)
    shortest = Schedule.objects.filter(interval_ms__isnull=False).aggregate(m=models.Min("interval_ms"))["m"]
    from scheduling.config.conf import conf

    if shortest is not None and shortest // 1000 < conf().team_min_schedule_interval_seconds:
        # its schedules keep working as they are, and may be changed so
        team.min_schedule_interval_seconds = max(1, shortest // 1000)
        team.save(update_fields=["min_schedule_interval_seconds"])


def members_of_default(apps, schema_editor):
    """Each user who is not a superuser, with the role their scheduling permissions amounted to."""
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    Membership = apps.get_model("scheduling", "Membership")
    team = apps.get_model("scheduling", "Team").objects.get(name=DEFAULT)
    for user in User.objects.filter(is_superuser=False):
        codenames = set(user.user_permissions.filter(content_type__app_label="scheduling")
                        .values_list("codename", flat=True))
        for group in user.groups.all():
            codenames |= set(group.permissions.filter(content_type__app_label="scheduling")
                             .values_list("codename", flat=True))
        role = "admin" if codenames & ADMIN_PERMISSIONS else "member" if codenames & MEMBER_PERMISSIONS else "viewer"
        Membership.objects.get_or_create(team=team, user=user, defaults={"role": role})


def tokens_to_keys(apps, schema_editor):
    """DRF's tokens (plaintext keys) -> legacy API keys (digests), then the plaintext table goes."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('authtoken_token') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return
        cursor.execute("SELECT key, user_id, created FROM authtoken_token")
        tokens = cursor.fetchall()
    ApiKey = apps.get_model("scheduling", "ApiKey")
    now = timezone.now()
    ApiKey.objects.bulk_create([
        ApiKey(user_id=user_id, name="DRF token (migrated)", prefix=key[:8],
               digest=hashlib.sha256(key.encode()).hexdigest(), legacy_token=True,
               scopes=["read", "write", "cancel", "schedules", "endpoints", "tasks", "audit"],
               created_at=created, created_by="migration 0019",
               expires_at=now + timedelta(days=LEGACY_KEY_DAYS))
        for key, user_id, created in tokens])
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE authtoken_token")
        cursor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")


APPEND_ONLY = """
CREATE FUNCTION dp_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('dp.audit_prune', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER dp_audit_append_only BEFORE UPDATE OR DELETE ON scheduling_auditevent
    FOR EACH ROW EXECUTE FUNCTION dp_audit_append_only();
"""
NOT_APPEND_ONLY = """
DROP TRIGGER IF EXISTS dp_audit_append_only ON scheduling_auditevent;
DROP FUNCTION IF EXISTS dp_audit_append_only();
"""


def team_field(related_name: str):
    """The team foreign key as the model has it: its callable default is Python's, never the
    database's (the column is added nullable, filled by fill_teams, then made NOT NULL)."""
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name=related_name,
                             to="scheduling.team", default=scheduling.models.teams.default_team_id)


def not_null(table: str, column: str = "team_id") -> migrations.RunSQL:
    return migrations.RunSQL(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL",
                             f"ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL")


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0018_flow_control'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Team',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=40, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9]+(?:-[a-z0-9]+)*\\Z', "Use lower-case letters and digits, in words joined by single '-' (e.g. billing or growth-eu).", code='invalid_team_name')])),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('max_in_flight', models.PositiveBigIntegerField(blank=True, help_text="messages pending or published at once (empty: the platform's default)", null=True)),
                ('max_schedules', models.PositiveIntegerField(blank=True, help_text='recurring schedules', null=True)),
                ('max_endpoints', models.PositiveIntegerField(blank=True, help_text='endpoints', null=True)),
                ('min_schedule_interval_seconds', models.PositiveIntegerField(blank=True, help_text='the shortest time between two runs of a recurring schedule', null=True, validators=[django.core.validators.MinValueValidator(1)])),
                ('api_rate', models.CharField(blank=True, help_text='API requests of the whole team, e.g. 1000/second, or off', max_length=32)),
                ('key_api_rate', models.CharField(blank=True, help_text='API requests of each of its keys, e.g. 100/second, or off', max_length=32)),
                ('celery_task_allowlist', models.TextField(blank=True, help_text="fnmatch patterns of the Celery tasks its endpoints and messages may run, one per line or comma-separated; a task must also match the platform's allowlist")),
                ('webhook_allowed_networks', models.TextField(blank=True, help_text='CIDRs its webhooks may reach although the SSRF guard refuses them (private, loopback, ...), one per line or comma-separated')),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.RunPython(default_team, migrations.RunPython.noop),
        migrations.CreateModel(
            name='Membership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('viewer', 'viewer'), ('member', 'member'), ('admin', 'admin')], default='member', max_length=16)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
            ],
            options={
                'ordering': ['team__name', 'user__username'],
            },
        ),
        migrations.CreateModel(
            name='ApiKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(blank=True, help_text='a label: what uses it', max_length=100)),
                ('prefix', models.CharField(db_index=True, help_text="the key's first characters", max_length=16)),
                ('digest', models.CharField(editable=False, max_length=64, unique=True)),
                ('scopes', django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=16), default=list, size=None)),
                ('legacy_token', models.BooleanField(default=False, help_text="a DRF token from before keys: also accepted as 'Authorization: Token <key>'")),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('created_by', models.CharField(blank=True, max_length=200)),
                ('expires_at', models.DateTimeField()),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'verbose_name': 'API key',
                'ordering': ['-created_at'],
            },
        ),
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('source', models.CharField(choices=[('api', 'API'), ('admin', 'admin'), ('command', 'command')], max_length=16)),
                ('actor', models.CharField(help_text='the user, the key (key dpk_…) or the command', max_length=200)),
                ('user_id', models.BigIntegerField(blank=True, help_text="the acting user's id, if a person", null=True)),
                ('key_prefix', models.CharField(blank=True, help_text='the API key used, if any', max_length=16)),
                ('team_id', models.BigIntegerField(blank=True, null=True)),
                ('team_name', models.CharField(blank=True, max_length=40)),
                ('action', models.CharField(help_text='entity.verb, e.g. endpoint.rotate_secret', max_length=64)),
                ('object_type', models.CharField(blank=True, max_length=64)),
                ('object_id', models.CharField(blank=True, max_length=100)),
                ('object_repr', models.CharField(blank=True, max_length=200)),
                ('before', models.JSONField(blank=True, help_text='the values before (secrets redacted)', null=True)),
                ('after', models.JSONField(blank=True, help_text='the values after (secrets redacted)', null=True)),
                ('extra', models.JSONField(blank=True, help_text="a bulk action's filter and count, ...", null=True)),
                ('ip', models.GenericIPAddressField(blank=True, null=True)),
                ('user_agent', models.CharField(blank=True, max_length=512)),
                ('request_id', models.CharField(blank=True, max_length=64)),
            ],
            options={
                'ordering': ['-at', '-id'],
            },
        ),
        migrations.AlterModelOptions(
            name='accuracyreport',
            options={'ordering': ['-day', 'team', 'endpoint', 'version', 'delivery_mode', 'delay_bucket']},
        ),
        migrations.AlterModelOptions(
            name='endpoint',
            options={'ordering': ['team__name', 'name']},
        ),
        migrations.RemoveConstraint(
            model_name='accuracyreport',
            name='one_report_row_per_group',
        ),
        migrations.RemoveConstraint(
            model_name='deliveryminute',
            name='one_delivery_minute_row',
        ),
        migrations.AlterField(
            model_name='endpoint',
            name='name',
            field=models.CharField(max_length=100, validators=[django.core.validators.RegexValidator(re.compile('^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$'), "Use letters, digits, '-' and '_', in words joined by '.' (a '*', '#' or an empty word would break routing).", code='invalid_name')]),
        ),
        migrations.AlterField(
            model_name='endpoint',
            name='webhook_secret',
            field=models.CharField(blank=True, editable=False, max_length=512),
        ),
        migrations.AlterField(
            model_name='endpoint',
            name='webhook_secret_previous',
            field=models.CharField(blank=True, editable=False, help_text='the secret before the last rotation: signatures with it stay valid until the time below', max_length=512),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='key',
            field=models.CharField(max_length=200, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9_-]+(?:[.:][A-Za-z0-9_-]+)*$', "Use letters, digits, '-' and '_', in words joined by '.' or ':'.", code='invalid_key')]),
        ),
        migrations.AddField(
            model_name='accuracyreport',
            name='team',
            field=models.CharField(default='default', help_text="the endpoint's team (copied, like its name)", max_length=40),
        ),
        migrations.AddField(
            model_name='apikey',
            name='user',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['team_id', 'at', 'id'], name='audit_team_at'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['at', 'id'], name='audit_at'),
        ),
        migrations.AddField(
            model_name='membership',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='team_memberships', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='membership',
            name='team',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='scheduling.team'),
        ),
        migrations.AddField(
            model_name='apikey',
            name='team',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='scheduling.team'),
        ),
        migrations.AddField(
            model_name='bulkaction',
            name='team',
            field=models.ForeignKey(blank=True, help_text="the team whose messages it changed (empty: every team's, an operator's)", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='bulk_actions', to='scheduling.team'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name="endpoint", name="team", field=team_field("endpoints")),
                migrations.AddField(model_name="schedule", name="team", field=team_field("schedules")),
                migrations.AddField(model_name="deliveryminute", name="team", field=models.ForeignKey(
                    db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+",
                    to="scheduling.team")),
                migrations.AddField(model_name="endpoint", name="queue", field=models.CharField(
                    editable=False, max_length=255, help_text="the broker queue its messages arrive in, and the "
                    "destination their routing keys name")),
            ],
            database_operations=[
                migrations.AddField(model_name="endpoint", name="team", field=models.ForeignKey(
                    null=True, on_delete=django.db.models.deletion.PROTECT, related_name="endpoints",
                    to="scheduling.team")),
                migrations.AddField(model_name="schedule", name="team", field=models.ForeignKey(
                    null=True, on_delete=django.db.models.deletion.PROTECT, related_name="schedules",
                    to="scheduling.team")),
                migrations.AddField(model_name="deliveryminute", name="team", field=models.ForeignKey(
                    null=True, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+",
                    to="scheduling.team")),
                migrations.AddField(model_name="endpoint", name="queue", field=models.CharField(
                    default="", max_length=255)),
                migrations.RunPython(fill_teams, migrations.RunPython.noop),
                not_null("scheduling_endpoint"),
                not_null("scheduling_schedule"),
                not_null("scheduling_deliveryminute"),
            ],
        ),
        migrations.AddConstraint(
            model_name='accuracyreport',
            constraint=models.UniqueConstraint(fields=('day', 'team', 'endpoint', 'version', 'delivery_mode', 'delay_bucket'), name='one_report_row_per_group'),
        ),
        migrations.AddConstraint(
            model_name='deliveryminute',
            constraint=models.UniqueConstraint(fields=('minute', 'team', 'shard', 'bucket_ms'), name='one_delivery_minute_row'),
        ),
        migrations.AddConstraint(
            model_name='endpoint',
            constraint=models.UniqueConstraint(fields=('team', 'name'), name='one_endpoint_name_per_team'),
        ),
        migrations.AddConstraint(
            model_name='endpoint',
            constraint=models.UniqueConstraint(fields=('queue',), name='one_endpoint_per_queue'),
        ),
        migrations.AddConstraint(
            model_name='endpoint',
            constraint=models.CheckConstraint(condition=models.Q(('queue', ''), _negated=True), name='endpoint_has_a_queue'),
        ),
        migrations.AddConstraint(
            model_name='schedule',
            constraint=models.UniqueConstraint(fields=('team', 'key'), name='one_schedule_key_per_team'),
        ),
        migrations.AddConstraint(
            model_name='membership',
            constraint=models.UniqueConstraint(fields=('team', 'user'), name='one_membership_per_team_and_user'),
        ),
        migrations.AddConstraint(
            model_name='apikey',
            constraint=models.CheckConstraint(condition=models.Q(('team__isnull', True), ('user__isnull', True), _connector='XOR'), name='api_key_of_a_team_or_a_user'),
        ),
        migrations.RunPython(members_of_default, migrations.RunPython.noop),
        migrations.RunPython(tokens_to_keys, migrations.RunPython.noop),
        migrations.RunSQL(APPEND_ONLY, NOT_APPEND_ONLY),
    ]
