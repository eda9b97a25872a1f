from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "harness.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"
