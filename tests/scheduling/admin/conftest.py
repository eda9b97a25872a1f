"""Admin test fixtures: logged-in staff users holding chosen permissions."""

import uuid

import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    """staff_client(*perms) -> a logged-in client for a staff user holding exactly these
    permissions ("scheduling.view_scheduledmessage", ...)."""
    from django.contrib.auth.models import Permission

    def make(*perms):
        user = django_user_model.objects.create_user(f"s{uuid.uuid4().hex[:8]}", password="pw", is_staff=True)
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        client.force_login(user)
        return client

    return make


READ_ONLY = ("scheduling.view_scheduledmessage", "scheduling.view_endpoint", "scheduling.view_topologyversion")


@pytest.fixture
def readonly_client(staff_client):
    return staff_client(*READ_ONLY)
