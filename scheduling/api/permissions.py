"""API permissions: model permissions for every method (reads need ``view_*``), plus the
explicit permission an action names (cancel, republish)."""

from rest_framework.permissions import DjangoModelPermissions


class ModelPermissions(DjangoModelPermissions):
    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
    }

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        extra = getattr(view, "action_permissions", {}).get(getattr(view, "action", None), [])
        return request.user.has_perms(extra)
