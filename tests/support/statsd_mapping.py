"""What statsd_exporter makes of a StatsD name under deploy/statsd/mapping.yml: the subset of its
mapping language the file uses (glob ``match``, ``match_metric_type``, ``name`` and ``labels``
with ``$n`` / ``${n}``, histogram observers), so a test can check the Grafana dashboard against
the names the stack emits without running the exporter."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

MAPPING = Path(__file__).resolve().parents[2] / "deploy" / "statsd" / "mapping.yml"
# StatsD type letters as statsd_exporter's match_metric_type calls them.
TYPES = {"c": "counter", "g": "gauge", "ms": "observer", "h": "observer", "d": "observer"}


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    metric_type: str | None
    name: str
    labels: dict[str, str]
    match: str


def rules(path: Path = MAPPING) -> list[Rule]:
    data = yaml.safe_load(path.read_text())
    out = []
    for m in data["mappings"]:
        assert m.get("match_type", "glob") == "glob", m  # the only kind this reads
        # A glob's * is one dot-separated part.
        regex = "^" + r"\.".join("([^.]+)" if part == "*" else re.escape(part)
                                 for part in m["match"].split(".")) + "$"
        out.append(Rule(re.compile(regex), m.get("match_metric_type"), m["name"],
                        dict(m.get("labels") or {}), m["match"]))
    return out


def _expand(template: str, groups: tuple[str, ...]) -> str:
    return re.sub(r"\$\{?(\d+)\}?", lambda g: groups[int(g.group(1)) - 1], template)


def prometheus(statsd_name: str, statsd_type: str, mapping: list[Rule] | None = None
               ) -> tuple[set[str], dict[str, str]] | None:
    """The series names and labels statsd_exporter exposes for one StatsD metric (``c``, ``g``,
    ``ms``), by the first rule that matches; None when no rule does."""
    kind = TYPES[statsd_type]
    for rule in mapping if mapping is not None else rules():
        found = rule.pattern.match(statsd_name)
        if found and rule.metric_type in (None, kind):
            name = _expand(rule.name, found.groups())
            labels = {k: _expand(v, found.groups()) for k, v in rule.labels.items()}
            series = ({f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "observer"
                      else {name})
            return series, labels
    return None


def airflow_names(mapping: list[Rule] | None = None) -> dict[str, str]:
    """The StatsD names of Airflow's own metrics the mapping lists (no wildcard): name → its
    match_metric_type. The stack tests check each arrives."""
    return {r.match: r.metric_type or "" for r in (mapping or rules())
            if "*" not in r.match and not r.match.startswith("airflow.export.")}
