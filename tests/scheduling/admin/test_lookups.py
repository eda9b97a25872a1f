"""Every changelist of the site accepts only its declared filters, search and date hierarchy
(scheduling/admin/base.py DeclaredLookupsOnly): any other lookup on a model's own fields in the
query string is refused (400), for a team's viewer and an operator alike. The admins are read
from admin.site._registry, so a new one is covered without a line here. Real PostgreSQL."""

from urllib.parse import parse_qsl

import pytest
from django.contrib import admin
from django.urls import reverse

from scheduling.admin.base import DeclaredLookupsOnly

pytestmark = pytest.mark.django_db


def changelists():
    return [(model, reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
            for model in admin.site._registry]


def probes(model) -> list[str]:
    """Undeclared lookups on the model's own fields: a regex and a prefix on each, the issue's two first."""
    names = [f.name for f in model._meta.concrete_fields if not f.is_relation]
    named = [n for n in ("payload", "webhook_secret", "key_hash", "password") if n in names]
    return ["payload__iregex=x", "webhook_secret__startswith=x"] + [
        f"{name}__{lookup}=x" for name in named + names[:3] for lookup in ("iregex", "startswith")]


def refused(response) -> bool:
    """As Django refuses a lookup it disallows: 400, or its redirect to ?e=1."""
    return response.status_code == 400 or (response.status_code == 302 and response.url.endswith("?e=1"))


def test_every_registered_admin_has_declared_lookups_only():
    assert all(isinstance(model_admin, DeclaredLookupsOnly) for model_admin in admin.site._registry.values())


@pytest.mark.parametrize("who", ["viewer", "operator"])
def test_undeclared_lookups_are_refused_on_every_changelist(staff_client, admin_client, who):
    client = staff_client("viewer") if who == "viewer" else admin_client
    reachable = 0
    for model, url in changelists():
        if client.get(url).status_code != 200:  # a viewer sees the team's pages, not auth's or axes'
            continue
        reachable += 1
        for probe in probes(model):
            response = client.get(f"{url}?{probe}")
            assert refused(response), (url, probe, response.status_code)
    assert reachable >= (8 if who == "viewer" else len(admin.site._registry))


def test_declared_filters_still_work_on_every_changelist(admin_client, make_rows):
    """Each filter link a changelist offers (list_filter, date hierarchy) answers 200, as do search and paging."""
    make_rows(2)
    followed = 0
    for model, url in changelists():
        page = admin_client.get(url)
        assert page.status_code == 200, url
        changelist = page.context["cl"]
        links = [choice["query_string"] for spec in changelist.filter_specs for choice in spec.choices(changelist)]
        for query in links:
            if not dict(parse_qsl(query.lstrip("?"))):
                continue
            response = admin_client.get(f"{url}{query}")
            assert response.status_code == 200, (url, query, response.status_code)
            followed += 1
        if changelist.search_fields:
            assert admin_client.get(f"{url}?q=x").status_code == 200
        if model_admin_hierarchy := admin.site._registry[model].date_hierarchy:
            assert admin_client.get(f"{url}?{model_admin_hierarchy}__year=2026").status_code == 200
        assert admin_client.get(f"{url}?p=1&o=1").status_code in (200, 302)
    assert followed >= 20


@pytest.mark.parametrize("query", ["status__exact=failed", "endpoint__id__exact=1", "due=overdue",
                                   "due_at__year=2026&due_at__month=1", "topology__id__exact=1"])
def test_the_messages_list_s_declared_filters_answer_for_a_viewer(staff_client, query):
    response = staff_client("viewer").get(f"{reverse('admin:scheduling_scheduledmessage_changelist')}?{query}")
    assert response.status_code == 200, query
