"""The client stands alone: installed as a package, with none of the platform's code on the path."""

import importlib.util
from pathlib import Path

import delayclient


def test_no_platform_code_is_importable():
    for name in ("scheduling", "delayplatform", "harness", "topology", "rabbit", "django_celery_beat"):
        assert importlib.util.find_spec(name) is None, f"{name} is importable beside the client"


def test_the_package_is_the_installed_one():
    here = Path(__file__).resolve().parents[1] / "src"
    assert here not in Path(delayclient.__file__).resolve().parents, "testing the source tree, not the install"
    assert delayclient.__version__.count(".") == 2
