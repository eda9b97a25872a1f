# The platform's version, declared here only: the admin's header, the API's root (/api/), the
# OpenAPI schema's info.version and pyproject.toml's [project] version read it (CHANGELOG.md says
# what each version changes). Set before the Celery app is imported, which may import the settings.
__version__ = "1.0.0"

from .celery import app as celery_app  # noqa: E402

__all__ = ("__version__", "celery_app")
