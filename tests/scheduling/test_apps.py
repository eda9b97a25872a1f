"""migrate makes the rate limit's cache table (no deployment step of its own): the app's
post_migrate handler runs createcachetable."""

import pytest
from django.apps import apps
from django.db import connection
from django.db.models.signals import post_migrate

pytestmark = pytest.mark.django_db


def tables() -> set[str]:
    return set(connection.introspection.table_names())


def test_migrate_makes_the_throttle_cache_table():
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE dp_throttle_cache")  # rolled back with the test's transaction
    assert "dp_throttle_cache" not in tables()
    config = apps.get_app_config("scheduling")
    post_migrate.send(sender=config, app_config=config, verbosity=0, interactive=False, using="default",
                      apps=apps, plan=[])
    assert "dp_throttle_cache" in tables()
