"""Seed the two cascade generations the platform knows; v2 is the default for new endpoints."""

from django.db import migrations

SEED = [
    {"name": "v1", "prefix": "dp.", "levels": 28, "queue_kind": "classic-lazy", "is_default": False},
    {"name": "v2", "prefix": "dp.v2.", "levels": 28, "queue_kind": "quorum", "is_default": True},
]


def seed(apps, schema_editor):
    TopologyVersion = apps.get_model("scheduling", "TopologyVersion")
    for row in SEED:
        TopologyVersion.objects.get_or_create(name=row["name"], defaults=row)


def unseed(apps, schema_editor):
    apps.get_model("scheduling", "TopologyVersion").objects.filter(
        name__in=[row["name"] for row in SEED]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_topology_versions")]
    operations = [migrations.RunPython(seed, unseed)]
