"""Template filters for the control room's pages."""

import calendar
from datetime import date

from django import template
from django.utils import formats
from django.utils.text import capfirst

from topology.explain import format_duration

register = template.Library()


@register.filter
def dp_duration(ms):
    return "—" if ms is None else format_duration(ms)


@register.filter
def dp_ms(ms):
    return "—" if ms is None else f"{ms:,} ms"


@register.inclusion_tag("admin/date_hierarchy.html")
def dp_date_hierarchy(cl):
    """Django's date drill-down for the messages list without its queries: Django lists the
    years, months and days that have rows (a DISTINCT over the table, seconds with 50 M rows);
    this lists every year from the earliest to the latest due time (two index probes), every
    month of a year and every day of a month. A day without messages shows an empty list."""
    from scheduling.messages.selectors import message_get_due_years

    field = cl.date_hierarchy
    year, month, day = (cl.params.get(f"{field}__{part}") for part in ("year", "month", "day"))

    def link(filters):
        return cl.get_query_string(filters, [f"{field}__"])

    try:
        year, month, day = (int(value) if value else None for value in (year, month, day))
        if year and month and day:
            chosen = date(year, month, day)
            return {"show": True, "back": {"link": link({f"{field}__year": year, f"{field}__month": month}),
                                           "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT"))},
                    "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}]}
        if year and month:
            days = [date(year, month, d) for d in range(1, calendar.monthrange(year, month)[1] + 1)]
            return {"show": True, "back": {"link": link({f"{field}__year": year}), "title": str(year)},
                    "choices": [{"link": link({f"{field}__year": year, f"{field}__month": month, f"{field}__day": d.day}),
                                 "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT"))} for d in days]}
        if year:
            return {"show": True, "back": {"link": link({}), "title": "All dates"},
                    "choices": [{"link": link({f"{field}__year": year, f"{field}__month": m}),
                                 "title": capfirst(formats.date_format(date(year, m, 1), "YEAR_MONTH_FORMAT"))}
                                for m in range(1, 13)]}
    except ValueError:  # a month 13 in the URL: Django's filter has already said so
        return {"show": False}
    first, last = message_get_due_years()
    return {"show": first is not None, "back": None,
            "choices": [{"link": link({f"{field}__year": y}), "title": str(y)} for y in range(first or 0, (last or -1) + 1)]}
