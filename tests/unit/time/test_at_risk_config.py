"""``at_risk: {after, alert}`` (ADR 0020): optional, validated with messages naming file, field,
value and fix, merged over ``defaults.yaml`` key by key, never part of ``config_version``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.config.risk import AtRisk
from tests.support.one_company import company_yaml, config_dir_with_defaults


@pytest.fixture()
def config_dir(tmp_path: Path) -> Path:
    return config_dir_with_defaults(tmp_path)


def _load(config_dir: Path, extra: str = ""):
    path = config_dir / "t.yaml"
    path.write_text(company_yaml("    deadline: 2h\n" + extra))
    return path, load_catalog(config_dir)


def test_left_out_means_the_automatic_risk_point_with_an_alert(config_dir):
    _, catalog = _load(config_dir)
    assert catalog.schedule("t/daily").policies.at_risk is None


@pytest.mark.parametrize(("written", "after", "share", "duration"), [
    ("'50%'", "50%", 0.5, None), ("' 7 %'", "7%", 0.07, None),
    ("45m", "45m", None, timedelta(minutes=45)), ("PT1H30M", "1h30m", None, timedelta(hours=1.5)),
])
def test_after_is_a_share_or_a_duration(config_dir, written, after, share, duration):
    _, catalog = _load(config_dir, f"    at_risk: {{after: {written}, alert: false}}\n")
    at_risk = catalog.schedule("t/daily").policies.at_risk
    assert (at_risk.after, at_risk.share, at_risk.duration, at_risk.alert) == (
        after, share, duration, False)


@pytest.mark.parametrize(("written", "message"), [
    ("'0%'", "at_risk.after '0%' is out of range; give a share of the deadline such as '50%'"),
    ("'150%'", "at_risk.after '150%' is not a share or a duration; give a share"),
    ("soon", "at_risk.after 'soon' is not a share or a duration; give a share"),
    ("3h", "at_risk.after 3h is not before the deadline 2h; give a shorter duration or a "
           "share such as '50%'"),
])
def test_a_wrong_after_names_file_field_value_and_fix(config_dir, written, message):
    path, catalog = _load(config_dir, f"    at_risk: {{after: {written}}}\n")
    (error,) = catalog.errors[str(path)]
    assert error.startswith(f"{path}: widget_exports[0]") and "at_risk" in error, error
    assert message in error, error


def test_an_unknown_key_and_a_non_boolean_alert_are_refused(config_dir):
    path, catalog = _load(config_dir, "    at_risk: {after: '50%', alrt: true}\n")
    assert "alrt" in catalog.errors[str(path)][0]
    path, catalog = _load(config_dir, "    at_risk: {alert: 'yes'}\n")
    assert "at_risk.alert" in catalog.errors[str(path)][0]


def test_defaults_merge_key_by_key_and_the_version_does_not_move(config_dir):
    _, plain = _load(config_dir)
    defaults = config_dir / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace(
        "policies:\n", "policies:\n  at_risk: {after: '40%', alert: false}\n", 1))
    assert "policies:\n  at_risk" in defaults.read_text()
    _, tuned = _load(config_dir, "    at_risk: {alert: true}\n")
    at_risk = tuned.schedule("t/daily").policies.at_risk
    assert at_risk == AtRisk(after="40%", alert=True)
    assert tuned.schedule("t/daily").config_version == plain.schedule("t/daily").config_version
    assert tuned.schedule("t/daily").snapshot()["policies"]["at_risk"] == {"after": "40%",
                                                                          "alert": True}
