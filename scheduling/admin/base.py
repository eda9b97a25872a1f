"""Plumbing shared by the control room's admin pages.

- Actions are gated by explicit permissions, and an action the user may not run answers 403
  (Django would silently drop it).
- The same actions appear as buttons on a detail page (``object_actions``), run on one row.
- Create/edit pages are plain forms whose only rules are the service's: the form parses, the
  service validates and acts, and its errors come back as form errors or admin messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse

from rabbit import BrokerError

from ..errors import ServiceError

# What a service may raise that an operator should read as one line, not a stack trace.
OPERATOR_ERRORS = (ServiceError, BrokerError)


def has_model_perm(request, admin_: admin.ModelAdmin, codename: str) -> bool:
    return request.user.has_perm(f"{admin_.opts.app_label}.{codename}")


class ControlRoomAdmin(admin.ModelAdmin):
    object_actions: dict[str, str] = {}  # action name -> button label on the detail page
    change_form_template = "admin/scheduling/change_form.html"

    def has_delete_permission(self, request, obj=None):
        return False  # rows are history (and the outbox); services change them, nothing deletes

    # --- actions: 403 instead of silently ignoring a forbidden one ----------------------------

    def declared_actions(self) -> set[str]:
        """Every action this admin or the site defines, whoever asks (public attributes only)."""
        own = {a if isinstance(a, str) else a.__name__ for a in self.actions or ()}
        return own | {name for name, _ in self.admin_site.actions}

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST":
            allowed = self.get_actions(request)
            declared = self.declared_actions()
            if any(name in declared and name not in allowed for name in request.POST.getlist("action")):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def run_each(self, request, items: Iterable, call: Callable, done: str) -> None:
        """Run one service call per selected row; report successes and each failure."""
        succeeded = 0
        for item in items:
            try:
                call(item)
            except OPERATOR_ERRORS as exc:
                self.message_user(request, str(exc), messages.ERROR)
            except ValidationError as exc:
                self.message_user(request, "; ".join(exc.messages), messages.ERROR)
            else:
                succeeded += 1
        if succeeded:
            self.message_user(request, f"{done}: {succeeded}", messages.SUCCESS)

    # --- the same actions as buttons on a detail page ----------------------------------------

    def object_action_applies(self, obj, name: str) -> bool:
        return True

    def get_object_actions(self, request, obj) -> list[tuple[str, str]]:
        allowed = self.get_actions(request)
        return [
            (name, label) for name, label in self.object_actions.items()
            if name in allowed and self.object_action_applies(obj, name)
        ]

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("<path:object_id>/actions/<str:name>/", self.admin_site.admin_view(self.object_action_view),
                 name="%s_%s_action" % info),
            *super().get_urls(),
        ]

    def object_action_view(self, request, object_id, name):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        allowed = self.get_actions(request)
        if name not in self.object_actions or name not in allowed:
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.opts.verbose_name} {object_id}")
        func = allowed[name][0]
        return func(self, request, self.get_queryset(request).filter(pk=obj.pk)) or HttpResponseRedirect(
            self.change_url(obj)
        )

    def change_url(self, obj) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        context = {"object_actions": self.get_object_actions(request, obj) if obj else [], **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    # --- plain forms whose rules are the service's -------------------------------------------

    def service_form_view(self, request, form_class, call: Callable, *, title: str, obj=None,
                          initial: dict | None = None, field_map: dict | None = None, done: str = "Saved"):
        """Render ``form_class`` in the admin's change form; on a valid POST run ``call`` with the
        cleaned data. The service's ValidationError lands on the named field (``field_map``
        renames service fields to form fields); its other errors become a form-wide error."""
        form = form_class(request.POST if request.method == "POST" else None, initial=initial)
        if form.is_bound and form.is_valid():
            try:
                result = call(form.cleaned_data)
            except ValidationError as exc:
                add_service_errors(form, exc, field_map or {})
            except OPERATOR_ERRORS as exc:
                form.add_error(None, str(exc))
            else:
                if obj is None:
                    self.log_addition(request, result, [{"added": {}}])
                else:
                    self.log_change(request, result, [{"changed": {"fields": form.changed_data}}])
                self.message_user(request, f"{done}: {result}", messages.SUCCESS)
                return HttpResponseRedirect(self.change_url(result))
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": str(obj) if obj else None,
            "adminform": helpers.AdminForm(form, [(None, {"fields": list(form.fields)})], {}, model_admin=self),
            "object_id": obj.pk if obj else None,
            "original": obj,
            "is_popup": False,
            "to_field": None,
            "media": self.media + form.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preserved_filters": self.get_preserved_filters(request),
            "show_save_and_add_another": False,
            "show_save_and_continue": False,
            "object_actions": self.get_object_actions(request, obj) if obj else [],
        }
        return self.render_change_form(request, context, add=obj is None, change=obj is not None, obj=obj)


def add_service_errors(form, exc: ValidationError, field_map: dict) -> None:
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for field, errors in exc.message_dict.items():
        target = field_map.get(field, field)
        for error in errors:
            form.add_error(target if target in form.fields else None, error)
