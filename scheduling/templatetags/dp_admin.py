"""Template filters for the control room's pages."""

from django import template

from topology.explain import format_duration

register = template.Library()


@register.filter
def dp_duration(ms):
    return "—" if ms is None else format_duration(ms)


@register.filter
def dp_ms(ms):
    return "—" if ms is None else f"{ms:,} ms"
