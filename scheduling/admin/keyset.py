"""The messages list as a history of hundreds of millions of rows allows: pages follow a cursor
(the last row's ordering value and id) instead of an offset, the count is exact only when the
list fits on one page and PostgreSQL's estimate otherwise, and the order is the one an index
gives: newest first, or by due time when a due filter is on. Django's ChangeList counts every
matching row for its paginator, sorts by any column asked and lists the calendar's dates with a
DISTINCT over the table: seconds each with 50 M rows (docs/operations/performance.md, "History"). A cursor
that no page wrote is a 400, as on the API (never read as the first page, never a 500 however
deep it nests)."""

from __future__ import annotations

from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest

from scheduling.admin.base import request_caller
from scheduling.core.cursors import AFTER, BEFORE, MalformedCursor, Position, cursor_decode, cursor_encode
from scheduling.core.roles import Action
from scheduling.db.counts import Tally, queryset_estimate
from scheduling.messages.selectors import message_estimate_in_past, message_get_page, message_list_groups

CURSOR_VAR = "cursor"


class MessageChangeList(ChangeList):
    """Pages by cursor (``?cursor=``), over the indexes the filters allow (message_get_page).
    The template shows "Newest / Newer / Older" links instead of page numbers."""

    # due filter value -> descending; the calendar (date hierarchy) lists its day latest first
    DUE_ORDER = {"past-day": True, "next-minute": False, "next-hour": False, "next-day": False, "later": False}

    def __init__(self, request, *args, **kwargs):
        self.request = request  # the caller's teams decide which index ranges a page reads
        try:
            self.cursor = cursor_decode(text=request.GET.get(CURSOR_VAR, ""))
        except MalformedCursor as exc:  # Django answers 400 (its plain page, no trace) and logs the reason
            raise BadRequest(f"{CURSOR_VAR} {exc}") from None
        super().__init__(request, *args, **kwargs)
        for params in (self.params, self.filter_params):  # links to filters start from the first page
            params.pop(CURSOR_VAR, None)

    def get_filters_params(self, params=None):
        lookup = super().get_filters_params(params)
        lookup.pop(CURSOR_VAR, None)
        return lookup

    def list_order(self) -> tuple[str, bool, list[dict]]:
        """(ordering column, descending, index ranges to merge) for the filters in use."""
        params = self.get_filters_params()
        due = params.get("due", [None])[-1]
        if due in self.DUE_ORDER:
            return "due_at", self.DUE_ORDER[due], []
        if any(key.startswith(f"{self.date_hierarchy}__") for key in params if self.date_hierarchy):
            return "due_at", True, []
        if self.query or "in_past" in params:  # a search finds a row or two; the past ones have their index
            return "created_at", True, []
        fixed = {name for name, key in (("status", "status__exact"), ("endpoint", "endpoint__id__exact"),
                                        ("topology", "topology__id__exact"), ("schedule", "schedule")) if key in params}
        teams = request_caller(self.request).team_ids(Action.READ)
        return "created_at", True, message_list_groups(fixed=fixed, team_ids=teams)

    def get_results(self, request):
        order_by, descending, groups = self.list_order()
        direction, position = self.cursor or (None, None)
        page = message_get_page(
            queryset=self.queryset, groups=groups, order_by=order_by, descending=descending,
            after=position if direction == AFTER else None, before=position if direction == BEFORE else None,
            limit=self.list_per_page)
        rows = page.rows
        newer = direction == AFTER or (direction == BEFORE and page.more)
        older = page.more if direction != BEFORE else True
        if not newer and not older:
            self.result_count = Tally(len(rows))
        else:
            estimate = queryset_estimate(queryset=self.queryset)
            if self.get_filters_params().get("in_past") == ["yes"]:  # bounded by what its partial index holds
                estimate = min(estimate, message_estimate_in_past() or estimate)
            self.result_count = Tally(max(len(rows), estimate), exact=False)

        def link(towards: str, row) -> str:
            position = Position(getattr(row, order_by), row.pk)
            return self.get_query_string({CURSOR_VAR: cursor_encode(direction=towards, position=position)})

        self.newest_url = self.get_query_string(remove=[CURSOR_VAR]) if newer else None
        self.newer_url = link(BEFORE, rows[0]) if newer and rows else None
        self.older_url = link(AFTER, rows[-1]) if older and rows else None
        self.order_description = {("created_at", True): "newest first", ("due_at", True): "latest due first",
                                  ("due_at", False): "soonest due first"}[order_by, descending]
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.result_list = rows
        self.can_show_all = False
        self.multi_page = newer or older
        self.paginator = None
