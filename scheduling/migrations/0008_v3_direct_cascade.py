"""v3, the platform's own cascade (direct exchanges, alternate-exchange pass-down, CC bit keys),
beside v1 and v2; endpoint names may have dots (they travel on v3 only)."""

import re

import django.core.validators
from django.db import migrations, models

V3 = {"name": "v3", "prefix": "dp.v3.", "levels": 28, "queue_kind": "quorum"}


def seed(apps, schema_editor):
    apps.get_model("scheduling", "TopologyVersion").objects.get_or_create(name=V3["name"], defaults=V3)


def unseed(apps, schema_editor):
    apps.get_model("scheduling", "TopologyVersion").objects.filter(name=V3["name"]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0007_default_version_is_a_setting'),
    ]

    operations = [
        migrations.AlterField(
            model_name='endpoint',
            name='name',
            field=models.CharField(max_length=100, unique=True, validators=[django.core.validators.RegexValidator(re.compile('^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$'), "Use letters, digits, '-' and '_', in words joined by '.' (a '*', '#' or an empty word would break routing).", code='invalid_name')]),
        ),
        migrations.AlterField(
            model_name='topologyversion',
            name='name',
            field=models.CharField(choices=[('v1', 'v1'), ('v2', 'v2'), ('v3', 'v3')], max_length=16, unique=True),
        ),
        migrations.RunPython(seed, unseed),
    ]
