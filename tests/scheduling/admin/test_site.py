"""The admin names the product, not Django."""

import pytest


@pytest.mark.django_db
def test_the_admin_index_and_login_name_the_product(client, admin_client):
    index = admin_client.get("/admin/").content.decode()
    login = client.get("/admin/login/").content.decode()
    for page in (index, login):
        assert "Django administration" not in page and "Django site admin" not in page
        assert "<title>" in page and "Delay platform" in page
    assert "Schedules, endpoints and delivery" in index
