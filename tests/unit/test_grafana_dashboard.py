"""The shipped Grafana dashboard (deploy/grafana/exports-dashboard.json) queries only series the
stack produces: each metric name in its PromQL comes, through statsd_exporter's mapping
(deploy/statsd/mapping.yml), from a StatsD name we emit (export_lib/metrics.py, sent as counter,
gauge or timer) or one of Airflow's that the mapping lists (those arrive on the scheduler stack:
tests/system/scheduler/test_alerts.py). And every metric we emit is on the dashboard, so a new
one cannot be left off."""

from __future__ import annotations

import json
import re
from pathlib import Path

from export_lib.metrics import METRICS, kind, metric_name
from tests.support.statsd_mapping import airflow_names, prometheus, rules

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "exports-dashboard.json"
STATSD_TYPE = {"counter": "c", "gauge": "g", "timer": "ms"}
# A metric name in PromQL: an identifier followed by a selector, a range, a comma or a closing paren
# (function names are followed by "(", label names sit inside by (...) / {...}).
SERIES = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?=[{\[),]|$)")
PROMQL_WORDS = {"by", "without", "le", "company", "schedule", "sum", "max", "rate", "increase",
                "histogram_quantile", "label_values"}


def _exprs(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def _queried(expr: str) -> set[str]:
    # Drop label matchers and strings: {company=~"$company"} names no series.
    bare = re.sub(r"\{[^}]*\}", "{}", re.sub(r'"[^"]*"', '""', expr))
    bare = re.sub(r"\b(by|without)\s*\([^)]*\)", "", bare)
    return {name for name in SERIES.findall(bare) if name not in PROMQL_WORDS}


def _emitted() -> dict[str, dict[str, str]]:
    """Every series the mapping makes of what the stack sends: ours for a sample company and
    schedule, and Airflow's the mapping names."""
    mapping = rules()
    out: dict[str, dict[str, str]] = {}
    for metric in METRICS:
        name = "airflow." + metric_name(metric, "acme", "acme/google-ads/primary")
        mapped = prometheus(name, STATSD_TYPE[kind(metric)], mapping)
        assert mapped is not None, f"no rule of deploy/statsd/mapping.yml maps {name}"
        series, labels = mapped
        assert labels == {"company": "acme", "schedule": "google-ads__primary"}, (name, labels)
        out.update(dict.fromkeys(series, {"metric": metric}))
    for name, metric_type in airflow_names(mapping).items():
        letter = {"counter": "c", "gauge": "g", "observer": "ms"}[metric_type]
        series, _ = prometheus(name, letter, mapping)
        out.update(dict.fromkeys(series, {"airflow": name}))
    return out


def test_every_series_the_dashboard_queries_is_one_the_stack_emits():
    dashboard = json.loads(DASHBOARD.read_text())
    emitted = _emitted()
    queried = {name: expr for expr in _exprs(dashboard) for name in _queried(expr)}
    assert queried  # the parse found the names (a dashboard without queries would pass)
    assert sorted(set(queried) - set(emitted)) == []
    # Every metric of ours is on it, and every Airflow metric the mapping names.
    shown = {emitted[name].get("metric") for name in queried} - {None}
    assert sorted(set(METRICS) - shown) == []
    assert sorted(set(airflow_names()) - {emitted[n].get("airflow") for n in queried}) == []


def test_the_parse_finds_the_series_of_a_real_expression_and_nothing_else():
    expr = ('histogram_quantile(0.95, sum by (le, schedule) '
            '(rate(export_render_seconds_bucket{company=~"$company"}[1h]))) '
            '+ max by (schedule) (export_render_rows_per_second) '
            '+ sum(rate(airflow_scheduler_heartbeat_total[5m])) * 60')
    assert _queried(expr) == {"export_render_seconds_bucket", "export_render_rows_per_second",
                              "airflow_scheduler_heartbeat_total"}
    assert _queried("label_values(export_runs_expected_total, company)") == {
        "export_runs_expected_total"}


def test_every_panel_uses_the_dashboards_data_source_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert queries and {json.dumps(p["datasource"]) for p in queries} == {
        json.dumps({"type": "prometheus", "uid": "${datasource}"})}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_reference_page_names_each_metric_as_the_mapping_does():
    """docs/reference/metrics-and-logs.md's Prometheus column (scripts/reference_pages.py)."""
    import sys

    sys.path.insert(0, str(DASHBOARD.parents[2] / "scripts"))
    try:
        from reference_pages import prometheus_name
    finally:
        sys.path.remove(str(DASHBOARD.parents[2] / "scripts"))
    mapping = rules()
    for metric in METRICS:
        name = "airflow." + metric_name(metric, "acme", "acme/daily-spend")
        series, _ = prometheus(name, STATSD_TYPE[kind(metric)], mapping)
        assert prometheus_name(metric) in series, (metric, series)
