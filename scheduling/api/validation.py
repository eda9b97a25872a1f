"""Strings the API refuses in every field but a JSON payload: control characters (C0, DEL, C1)
and unpaired surrogates (the rule and its words: core/text.py). PostgreSQL cannot store a NUL,
psycopg cannot encode a lone surrogate, and a parser that stops at either one (dates did) would
store something other than what was sent; no name, target, key or date needs any of them."""

from collections.abc import Mapping

from rest_framework import serializers

from scheduling.core.text import CONTROL_CHARACTERS, has_control_characters

MESSAGE = f"must not contain {CONTROL_CHARACTERS}"


def refused_character_errors(fields: Mapping, data: Mapping) -> dict[str, list[str]]:
    """Field name -> [MESSAGE] for each writable field whose raw input is a string with a refused
    character (a JSONField's strings are the payload's business: any JSON text is allowed there)."""
    return {
        name: [MESSAGE]
        for name, field in fields.items()
        if not field.read_only and not isinstance(field, serializers.JSONField)
        and isinstance(data.get(name), str) and has_control_characters(data[name])
    }

class RefuseControlCharacters:
    """Serializer mixin: a string field with a refused character is a 400 naming the field,
    found before any field parses (and so before any query) — for every field, present and future."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            errors = refused_character_errors(self.fields, data)
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)
