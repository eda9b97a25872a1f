"""The API's keys: ``Authorization: Bearer <key>`` (and ``Token <key>`` for keys migrated from DRF's
tokens). An unknown, revoked or expired key is a 401; what a live key may do is its caller's
(core/caller.py), asked by the views."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.contrib.auth.models import User
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from scheduling.models import ApiKey

if TYPE_CHECKING:  # imports DRF's views, which import this module (DEFAULT_AUTHENTICATION_CLASSES)
    from drf_spectacular.openapi import AutoSchema


class TeamKeyUser:
    """What ``request.user`` is for a team's key: authenticated, nobody's account, no staff, no
    model permissions (the key's scopes are its rights)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = id = None

    def __init__(self, key: ApiKey) -> None:
        self.key = key
        self.username = f"key {key.prefix}"

    def get_username(self) -> str:
        return self.username

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return False

    def has_perms(self, perms: Iterable[str], obj: object = None) -> bool:
        return False

    def __str__(self) -> str:
        return self.username


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User | TeamKeyUser, ApiKey] | None:
        from scheduling.teams.services import api_key_authenticate

        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in (b"bearer", b"token"):
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid key header: give 'Bearer <key>'.")
        try:
            text = header[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid key.") from None
        key, why = api_key_authenticate(key=text, legacy=header[0].lower() == b"token")
        if key is None:
            raise exceptions.AuthenticationFailed(f"{why[0].upper()}{why[1:]}.")
        return (key.user if key.user is not None else TeamKeyUser(key)), key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


# drf-spectacular's extensions register in an untyped __init_subclass__
class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The key as the OpenAPI schema names it: HTTP bearer."""

    target_class = ApiKeyAuthentication
    name = "apiKey"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer",
                "description": "an API key (python manage.py create_api_key, the admin, or POST /api/keys/): "
                               "Authorization: Bearer <key>"}
