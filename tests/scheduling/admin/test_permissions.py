"""Staff only; a viewer of a team sees its rows, gets no action buttons, and every attempt to act
answers 403 (nothing changes); the cascades' pages are the operators'."""

import pytest
from django.urls import reverse

from scheduling.models import Endpoint, ScheduledMessage, TopologyVersion

pytestmark = pytest.mark.django_db
MESSAGES = reverse("admin:scheduling_scheduledmessage_changelist")
ENDPOINTS = reverse("admin:scheduling_endpoint_changelist")
VERSIONS = reverse("admin:scheduling_topologyversion_changelist")


def action_url(model: str, pk, name: str) -> str:
    return reverse(f"admin:scheduling_{model}_action", args=[pk, name])


def test_non_staff_users_are_sent_to_the_login_page(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("plain", password="pw"))
    for url in (MESSAGES, reverse("admin:scheduling_dashboard"), VERSIONS):
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("admin:login"))


def test_read_only_staff_sees_lists_and_details_without_action_buttons(readonly_client, make_rows, versions):
    (message,) = make_rows(1)
    pages = {
        MESSAGES: 'name="action"',
        ENDPOINTS: 'name="action"',
        reverse("admin:scheduling_scheduledmessage_change", args=[message.pk]): 'class="dp-action-button"',
        reverse("admin:scheduling_endpoint_change", args=[message.endpoint_id]): 'class="dp-action-button"',
        reverse("admin:scheduling_dashboard"): 'class="dp-action-button"',
    }
    for url, forbidden in pages.items():
        response = readonly_client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert forbidden not in page and "addlink" not in page, url
    assert str(message.pk)[:8] in readonly_client.get(MESSAGES).content.decode()
    assert readonly_client.get(VERSIONS).status_code == 403  # the cascades are the operators' to look into


@pytest.mark.parametrize("changelist,model,action", [
    (MESSAGES, "scheduledmessage", "cancel"),
    (MESSAGES, "scheduledmessage", "republish"),
    (MESSAGES, "scheduledmessage", "resend"),
    (ENDPOINTS, "endpoint", "deactivate"),
    (ENDPOINTS, "endpoint", "enable"),
    (VERSIONS, "topologyversion", "provision"),
    (VERSIONS, "topologyversion", "verify"),
])
def test_read_only_staff_gets_403_when_posting_an_action(readonly_client, make_rows, versions, changelist, model,
                                                         action):
    (message,) = make_rows(1)
    pk = {"scheduledmessage": message.pk, "endpoint": message.endpoint_id, "topologyversion": versions["v2"].pk}[model]
    response = readonly_client.post(changelist, {"action": action, "_selected_action": [pk]})
    assert response.status_code == 403
    assert readonly_client.post(action_url(model, pk, action)).status_code == 403
    message.refresh_from_db()
    assert message.status == ScheduledMessage.Status.PENDING and Endpoint.objects.get().is_active
    assert TopologyVersion.objects.get(pk=versions["v2"].pk).verified_at is None


def test_read_only_staff_cannot_add_or_edit(readonly_client, make_rows):
    (message,) = make_rows(1)
    assert readonly_client.post(reverse("admin:scheduling_scheduledmessage_add"), {}).status_code == 403
    assert readonly_client.post(reverse("admin:scheduling_endpoint_add"), {"name": "x"}).status_code == 403
    change = reverse("admin:scheduling_endpoint_change", args=[message.endpoint_id])
    assert readonly_client.post(change, {"handler": "celery_task", "handler_target": "x.y"}).status_code == 403
    assert Endpoint.objects.get().handler == "none"


def test_a_member_cancels_and_republishes_but_manages_no_endpoint(staff_client, make_rows):
    client = staff_client("member")
    pending, failed = make_rows(1)[0], make_rows(1, status=ScheduledMessage.Status.FAILED)[0]
    page = client.get(MESSAGES).content.decode()
    assert 'value="cancel"' in page and 'value="republish"' in page
    assert 'value="deactivate"' not in client.get(ENDPOINTS).content.decode()
    assert client.post(ENDPOINTS, {"action": "deactivate", "_selected_action": [pending.endpoint_id]}).status_code == 403
    detail = client.get(reverse("admin:scheduling_scheduledmessage_change", args=[pending.pk])).content.decode()
    assert 'value="cancel"' in detail
    assert client.post(action_url("scheduledmessage", pending.pk, "cancel")).status_code == 302
    assert client.post(action_url("scheduledmessage", failed.pk, "republish")).status_code == 302
    pending.refresh_from_db()
    failed.refresh_from_db()
    assert pending.status == "cancelled" and failed.status == "pending" and Endpoint.objects.get().is_active


def test_object_actions_only_accept_post(admin_client, make_rows):
    (message,) = make_rows(1)
    assert admin_client.get(action_url("scheduledmessage", message.pk, "cancel")).status_code == 405
    message.refresh_from_db()
    assert message.status == "pending"
