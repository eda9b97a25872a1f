"""The release is declared once (delayplatform/__init__.py) and every place that shows it reads
it: the admin's header, the API's root, the OpenAPI schema, pyproject.toml."""

import ast
import re
import tomllib

import pytest

from delayplatform import __version__
from harness.paths import ROOT


def test_the_version_is_a_release_number_declared_as_a_literal():
    """setuptools reads it without importing the package (pyproject.toml's dynamic version)."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    tree = ast.parse((ROOT / "delayplatform" / "__init__.py").read_text())
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]]
    assert literals == [__version__]


def test_pyproject_reads_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "delayplatform.__version__"}


def test_the_previous_release_is_a_full_commit():
    previous = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["delayplatform"]["previous-release"]
    assert re.fullmatch(r"[0-9a-f]{40}", previous["commit"])


@pytest.mark.django_db
def test_the_api_root_and_the_schema_answer_the_version(api):
    root = api.get("/api/")
    assert root.status_code == 200 and root.json()["version"] == __version__
    assert root.json()["messages"].endswith("/api/messages/")  # still the routes
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200 and schema.json()["info"]["version"] == __version__


@pytest.mark.django_db
def test_the_admin_shows_the_version_on_every_page(client, admin_client):
    for page in (admin_client.get("/admin/"), client.get("/admin/login/"),
                 admin_client.get("/admin/scheduling/scheduledmessage/")):
        assert page.status_code == 200 and f"Delay platform {__version__}" in page.content.decode()
