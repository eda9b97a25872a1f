"""Turn service errors into API responses: field errors are 400s naming the field."""

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from scheduling.core.errors import BulkValidationError, ServiceError

# Service argument names that the API spells differently.
API_FIELDS = {"delay": "delay_seconds"}


def api_errors(errors: dict) -> dict:
    return {API_FIELDS.get(field, field): messages for field, messages in errors.items()}


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        return Response(api_errors(as_serializer_error(exc)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, BulkValidationError):
        items = [api_errors(exc.errors.get(i, {})) for i in range(exc.total)]
        return Response({"messages": items}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ServiceError):
        return Response({"detail": str(exc)}, status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": "request body too large"}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    return drf_exception_handler(exc, context)
