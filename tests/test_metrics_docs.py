"""docs/observability/metrics.md, docs/alerts.yml and docs/grafana-dashboard.json against the metrics the code
exports: every metric documented, the alert rules valid with the expected names, and every query
of the rules and the dashboard naming metrics that exist (a renamed metric breaks this, not a
dashboard in production)."""

import json
import re
from datetime import datetime, timezone

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from harness.paths import ROOT
from scheduling.messages.selectors import Outbox
from scheduling.observability import metrics, webhook_metrics
from scheduling.probes.metrics_figures import Figures, families
from scheduling.versions.broker import VersionDepths

DOCS = ROOT / "docs"
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}


def exported() -> dict[str, str]:
    """Metric family name -> type, of everything the platform defines (not prometheus_client's own)."""
    found = {m._name: m._type for module in (metrics, webhook_metrics) for m in vars(module).values()
             if isinstance(m, MetricWrapperBase)}
    every_part = Figures(0.0, ["v3"], Outbox({"v3": 1}, datetime.now(timezone.utc)), {"v3": 0},
                         {"v3": VersionDepths({0: 1}, 0)})
    found |= {family.name: family.type for family in families(every_part, now=0.0)}
    return found


def sample_names() -> set[str]:
    return {name + suffix for name, kind in exported().items() for suffix in SUFFIXES[kind]}


def used_in(expr: str) -> set[str]:
    return set(re.findall(r"\bdelay_[a-z0-9_]+\b", expr))


def test_the_code_exports_what_the_issue_asks_for():
    names = sample_names()
    for name in ["delay_deliveries_total", "delay_duplicates_suppressed_total", "delay_handler_failures_total",
                 "delay_handler_retries_total", "delay_cancellations_total", "delay_delivery_lateness_seconds_bucket",
                 "delay_outbox_pending_messages", "delay_outbox_oldest_age_seconds", "delay_relay_published_total",
                 "delay_relay_failures_total", "delay_in_flight_messages", "delay_unroutable_messages",
                 "delay_delivery_loop_held_messages", "delay_overdue_messages", "delay_scheduled_in_past_total"]:
        assert name in names
    assert metrics.LATENESS._upper_bounds[0] == 0.001 and metrics.LATENESS._upper_bounds[-2] == 3600


def test_every_metric_is_documented_with_its_type():
    text = (DOCS / "observability" / "metrics.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(delay_[a-z_]+)` \| (\w+)", text, re.M)}
    for name, kind in exported().items():
        shown = name + "_total" if kind == "counter" else name
        assert shown in rows, f"{shown} is not in docs/observability/metrics.md"
        assert rows[shown] == kind, f"{shown} is documented as a {rows[shown]}, it is a {kind}"
    documented_only = set(rows) - sample_names() - set(exported())
    assert not documented_only, f"documented but not exported: {documented_only}"


def test_alert_rules_are_valid_and_query_exported_metrics():
    rules = [rule for group in yaml.safe_load((DOCS / "alerts.yml").read_text())["groups"] for rule in group["rules"]]
    by_name = {rule["alert"]: rule for rule in rules}
    assert {"DelayOutboxStuck", "DelayLatenessP99High", "DelayUnroutableMessages", "DelayMessagesLost"} <= set(by_name)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert used_in(rule["expr"]) and used_in(rule["expr"]) <= sample_names(), rule["alert"]
    assert "histogram_quantile(0.99" in by_name["DelayLatenessP99High"]["expr"]
    assert "delay_overdue_messages" in by_name["DelayMessagesLost"]["expr"]


@pytest.fixture(scope="module")
def dashboard():
    return json.loads((DOCS / "grafana-dashboard.json").read_text())


def test_the_dashboard_is_grafana_json_over_exported_metrics(dashboard):
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    for panel in panels:
        assert panel["targets"] and {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
    used = set().union(*map(used_in, exprs))
    assert used <= sample_names(), used - sample_names()
    # what the issue asks the dashboard to show
    for wanted in ["delay_deliveries_total", "delay_outbox_pending_messages", "delay_outbox_oldest_age_seconds",
                   "delay_in_flight_messages", "delay_unroutable_messages", "delay_delivery_loop_held_messages",
                   "delay_relay_failures_total"]:
        assert wanted in used, wanted
    assert any("histogram_quantile(0.5," in e for e in exprs) and any("histogram_quantile(0.99," in e for e in exprs)
