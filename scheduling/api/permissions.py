"""The API's permission: what a request may do is its caller's (core/caller.py). Each view maps
its actions to a teams.roles.Action (``team_actions``); a request needs that action in some team
(403 otherwise), and an object needs it in the object's team. Another team's object never gets
this far: the views read through queryset_for_caller, so it is a 404."""

from rest_framework.permissions import BasePermission

from scheduling.api.callers import request_caller


class TeamPermissions(BasePermission):
    message = "you may not do this in your teams (your role, or your key's scopes)"

    def has_permission(self, request, view):
        action = view.team_actions.get(getattr(view, "action", None))
        if action is None:
            return True
        teams = request_caller(request).team_ids(action)
        return teams is None or bool(teams)

    def has_object_permission(self, request, view, obj):
        action = view.team_actions.get(getattr(view, "action", None))
        return action is None or request_caller(request).may(action, view.team_id_of(obj))
