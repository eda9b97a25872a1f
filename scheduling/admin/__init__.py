"""The Django admin is the operators' control room. One module per area; each registers its
ModelAdmins on import. Admin classes call services and selectors only (no business logic)."""

from . import dashboard, endpoints, messages, reports, topology  # noqa: F401  (registers the admins)
