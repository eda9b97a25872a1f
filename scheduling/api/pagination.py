"""The message list's pages: a cursor (the last row's created_at and id), newest first, no count.

DRF's PageNumberPagination counts every matching row for each page (347 ms with 2 M of one
endpoint's messages; seconds at 50 M) and reads page n by skipping n x 50 rows. A cursor names
where the page ends, so page 1,000 costs what page 1 costs; the id breaks the ties of a bulk
request's 1,000 messages sharing a created_at, so every row is listed exactly once. A cursor that
no page wrote is a 400 naming the parameter (not the first page, and never a 500 however deep it nests)."""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from scheduling.core.cursors import AFTER, BEFORE, MalformedCursor, Position, cursor_decode, cursor_encode
from scheduling.messages.selectors import message_get_page


class MessageCursorPagination(BasePagination):
    """``?cursor=`` from a page's ``next`` or ``previous`` link; the answer is
    ``{"next": url|null, "previous": url|null, "results": [...]}``. ``groups`` (set by the view)
    are the index ranges the list merges (message_list_groups)."""

    cursor_query_param = "cursor"
    page_size = 50

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        try:
            cursor = cursor_decode(text=request.query_params.get(self.cursor_query_param, ""))
        except MalformedCursor as exc:
            raise ValidationError({self.cursor_query_param: [f"{exc}; use a page's next or previous link"]}) from None
        direction, position = cursor or (None, None)
        page = message_get_page(
            queryset=queryset, groups=view.list_groups() if view is not None else [],
            after=position if direction == AFTER else None, before=position if direction == BEFORE else None,
            limit=self.page_size)
        rows = page.rows
        newer = direction == AFTER or (direction == BEFORE and page.more)
        older = page.more if direction != BEFORE else True
        self.next_url = self._link(AFTER, rows[-1]) if older and rows else None
        self.previous_url = self._link(BEFORE, rows[0]) if newer and rows else None
        return rows

    def _link(self, direction: str, row) -> str:
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param,
                                   cursor_encode(direction=direction, position=Position(row.created_at, row.pk)))

    def get_paginated_response(self, data):
        return Response({"next": self.next_url, "previous": self.previous_url, "results": data})

    def get_paginated_response_schema(self, schema):
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {"type": "object", "required": ["results"],
                "properties": {"next": link, "previous": link, "results": schema}}

    def get_schema_operation_parameters(self, view):
        return [{"name": self.cursor_query_param, "required": False, "in": "query",
                 "description": "the cursor of a page, from the next or previous link of another",
                 "schema": {"type": "string"}}]



class AttemptCursorPagination(CursorPagination):
    """A message's attempts, oldest first (newest last), 100 a page: a message has a few (its
    retries), but every resend adds more. A malformed cursor is a 400 naming it (DRF's own answers
    404, and a forged position reached the database)."""

    ordering = ("started_at", "id")
    page_size = 100

    def decode_cursor(self, request):
        problem = {self.cursor_query_param: ["malformed cursor: use a page's next or previous link"]}
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError(problem) from None
        if cursor is not None and cursor.position is not None and parse_datetime(cursor.position) is None:
            raise ValidationError(problem)
        return cursor
