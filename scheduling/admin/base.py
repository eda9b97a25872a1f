"""Plumbing shared by the control room's admin pages.

- Every list, form choice and action starts from the user's teams (queryset_for_caller), and
  what a user may do is their role there (``team_actions``: the permission's name -> a
  teams.roles.Action; None: platform operators only). Django's model permissions grant nothing
  here; superusers are the platform's operators.
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
from scheduling.core.caller import Caller
from scheduling.core.errors import ServiceError
from scheduling.core.roles import Action
from scheduling.teams.selectors import caller_for_user, queryset_for_caller

# What a service may raise that an operator should read as one line, not a stack trace.
OPERATOR_ERRORS = (ServiceError, BrokerError)


def request_caller(request) -> Caller:
    """The admin user as a caller (their roles), once per request."""
    caller = getattr(request, "_dp_caller", None)
    if caller is None:
        caller = request._dp_caller = caller_for_user(user=request.user)
    return caller


# The lookups Django's own list filters put in a changelist's query string after their field's path
# (ChoicesFieldListFilter: __exact, __isnull; DateFieldListFilter: __gte, __lt; EmptyFieldListFilter:
# __isempty; AllValuesFieldListFilter: the bare path); a related field's filter adds its target's
# name: ``endpoint__id__exact``.
FILTER_LOOKUPS = frozenset({"exact", "isnull", "gte", "lt", "isempty"})


class DeclaredLookupsOnly:
    """A changelist filters by what its admin declares, nothing else: its list_filter (a field's
    path with the lookups Django's filter for it uses, a custom filter's parameter), its
    date_hierarchy (``<field>__year``, ``__month``, ``__day``) and the lookups of raw-id popups
    (ForeignKey.limit_choices_to); search (``q``), ordering and paging are Django's own parameters.
    Django alone accepts any lookup on the model's own fields (``?payload__iregex=``: a regex scan
    of a team's history; ``?webhook_secret__startswith=``: a prefix oracle on a sealed secret);
    anything undeclared is refused here as Django refuses a lookup it disallows (400). Every admin
    of the site has it: ControlRoomAdmin by inheritance, the others (auth, axes) re-registered with
    it by declared_lookups_only() (scheduling/admin/__init__.py)."""

    def lookup_allowed(self, lookup, value, request=None):
        from django.contrib.admin.filters import ListFilter

        if self.date_hierarchy and lookup in {f"{self.date_hierarchy}__{part}" for part in ("year", "month", "day")}:
            return True
        declared = set()
        for item in (self.get_list_filter(request) if request is not None else self.list_filter):
            if isinstance(item, type) and issubclass(item, ListFilter):
                if getattr(item, "parameter_name", None) == lookup:
                    return True
                continue
            declared.add(item[0] if isinstance(item, (list, tuple)) else item)
        for field in declared:
            if lookup == field:  # AllValuesFieldListFilter's own parameter
                return True
            rest = lookup[len(field) + 2:] if lookup.startswith(f"{field}__") else None
            if rest is not None and (rest in FILTER_LOOKUPS or rest.count("__") == 1 and rest.endswith("__exact")):
                return True
        return self._popup_lookup(lookup, value)

    def _popup_lookup(self, lookup, value) -> bool:
        """A raw-id popup's lookup from a ForeignKey's limit_choices_to (Django's own first check)."""
        from django.contrib.admin import widgets

        for fk_lookup in self.model._meta.related_fkey_lookups:
            fk_lookup = fk_lookup() if callable(fk_lookup) else fk_lookup
            if (lookup, value) in widgets.url_params_from_lookup_dict(fk_lookup).items():
                return True
        return False


def declared_lookups_only(*, site: admin.AdminSite) -> None:
    """Re-register every admin of ``site`` that lacks DeclaredLookupsOnly (django.contrib.auth's,
    axes') as a subclass that has it: called once the apps before this one registered theirs."""
    for model, model_admin in list(site._registry.items()):
        if not isinstance(model_admin, DeclaredLookupsOnly):
            cls = type(model_admin)
            site.unregister(model)
            site.register(model, type(cls.__name__, (DeclaredLookupsOnly, cls), {"__module__": cls.__module__}))


class ControlRoomAdmin(DeclaredLookupsOnly, admin.ModelAdmin):
    object_actions: dict[str, str] = {}  # action name -> button label on the detail page
    change_form_template = "admin/scheduling/change_form.html"
    # permission -> the action it is in the team (None: operators only); "view" also lets the
    # module show on the index
    team_actions: dict[str, Action | None] = {"view": Action.READ, "add": None, "change": None}

    @staticmethod
    def caller(request) -> Caller:
        return request_caller(request)

    def team_id_of(self, obj) -> int | None:
        return obj.team_id

    def base_queryset(self, request):
        """The rows before the caller's teams narrow them (subclasses: their selector)."""
        return super().get_queryset(request)

    def get_queryset(self, request):
        return queryset_for_caller(queryset=self.base_queryset(request), caller=self.caller(request))

    def may(self, request, permission: str, obj=None) -> bool:
        """Whether the user holds the permission's action in the object's team (or in some team)."""
        if not (request.user.is_active and request.user.is_staff):
            return False
        caller = self.caller(request)
        action = self.team_actions.get(permission)
        if action is None:
            return caller.operator
        if obj is not None:
            return caller.may(action, self.team_id_of(obj))
        teams = caller.team_ids(action)
        return teams is None or bool(teams)

    def has_module_permission(self, request):
        return self.may(request, "view")

    def has_view_permission(self, request, obj=None):
        return self.may(request, "view", obj) or self.may(request, "change", obj)

    def has_add_permission(self, request):
        return self.may(request, "add")

    def has_change_permission(self, request, obj=None):
        return self.may(request, "change", obj)

    def has_delete_permission(self, request, obj=None):
        return False  # rows are history (and the outbox); services change them, nothing deletes

    def acting_on(self, request, queryset, action: Action):
        """The selected rows the user may do ``action`` to (their role in each row's team); the
        others are named in a message and left alone."""
        allowed = queryset_for_caller(queryset=queryset, caller=self.caller(request), action=action)
        skipped = queryset.count() - allowed.count()
        if skipped:
            self.message_user(request, f"{skipped} selected row(s) left alone: your role in their team does not "
                                       f"allow it", messages.WARNING)
        return allowed

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
                 name="{}_{}_action".format(*info)),
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


class TeamListFilter(admin.SimpleListFilter):
    """By team: only the user's teams are offered (Django's own filter would list every team)."""

    title = "team"
    parameter_name = "team"
    field = "team"  # the path from the admin's model to the team

    def lookups(self, request, model_admin):
        from scheduling.models import Team

        teams = queryset_for_caller(queryset=Team.objects.order_by("name"), caller=request_caller(request))
        return [(team.pk, team.name) for team in teams[:200]]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{f"{self.field}_id": value}) if value and value.isdigit() else queryset


class EndpointListFilter(admin.SimpleListFilter):
    """By endpoint: only the user's teams' endpoints are offered (named with their team where the
    user sees several teams). Its parameter is Django's own (endpoint__id__exact), which links
    from other pages use."""

    title = "endpoint"
    parameter_name = "endpoint__id__exact"

    def lookups(self, request, model_admin):
        from scheduling.models import Endpoint

        endpoints = queryset_for_caller(queryset=Endpoint.objects.select_related("team").order_by("team__name", "name"),
                                        caller=request_caller(request))[:500]
        several = len({e.team_id for e in endpoints}) > 1
        return [(e.pk, f"{e.team.name}/{e.name}" if several else e.name) for e in endpoints]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(endpoint_id=value) if value and value.isdigit() else queryset
