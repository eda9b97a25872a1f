"""Small HTML pieces for read-only admin fields; everything passes through format_html."""

from __future__ import annotations

import json
import re
from datetime import timezone as dt_timezone

from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

STATUS_COLORS = {
    "pending": "#8c6d31", "published": "#2f6fb0", "delivered": "#3a9b5c", "cancelled": "#777", "failed": "#c23b3b",
    "expired": "#a0522d", "superseded": "#777", "waiting": "#8c6d31", "skipped": "#777",
}


def status_badge(status: str) -> SafeString:
    return format_html('<span class="dp-status dp-status-{}" style="color:{};font-weight:bold">{}</span>',
                       status, STATUS_COLORS.get(status, "#444"), status)


def moment(value) -> str:
    """A timestamp to the millisecond, in UTC: delays are about milliseconds."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def moment_column(field: str, description: str):
    """A ModelAdmin column/read-only field showing ``field`` with :func:`moment`, sortable."""

    def column(admin_, obj):
        value = getattr(obj, field)
        return admin_.get_empty_value_display() if value is None else moment(value)

    column.short_description, column.admin_order_field = description, field
    return column


def pretty_json(value) -> SafeString:
    return format_html('<pre class="dp-json">{}</pre>', json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


_MARKUP = re.compile(r"\*\*(.+?)\*\*|`(.+?)`")


def markdown_cell(text: str) -> SafeString:
    """The explain table's cells use **bold** and `code`; render just those two."""
    out, last = [], 0
    for match in _MARKUP.finditer(text):
        out.append(escape(text[last:match.start()]))
        bold, code = match.groups()
        out.append(format_html("<strong>{}</strong>", bold) if bold is not None else format_html("<code>{}</code>", code))
        last = match.end()
    out.append(escape(text[last:]))
    return mark_safe("".join(out))


def table(headers, rows, *, css_class: str = "dp-table", cell=escape) -> SafeString:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((cell(str(c)),) for c in row)),) for row in rows)
    )
    return format_html('<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', css_class, head, body)
