"""The pure parts of alerts and metrics (issue 13, items 5-6): the dedupe key, who is told,
the words, the ``alerts:`` config, the once-only ledger claim, metric names (the log lines:
test_logfmt.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from export_lib.alerts import Alert, AlertReason, alert_key, recipients, schema_change_alert
from export_lib.config.messages import issues_from_validation
from export_lib.config.models import AlertsConfig
from export_lib.ledger import open_ledger
from export_lib.ledger.notices import claim_notice, confirm_notice, fail_notice, list_notices
from export_lib.metrics import metric_name

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
NOW = SLOT + timedelta(hours=3)
RUN = "acme/daily-spend/2026-03-29T05:00Z"


def test_the_dedupe_key_is_per_run_and_reason_and_destination():
    assert alert_key(RUN, "failed") == f"alert:{RUN}:failed"
    assert alert_key(RUN, AlertReason.DELIVERY, "sftp-a") == f"alert:{RUN}:delivery:sftp-a"
    assert alert_key(RUN, "deadline") != alert_key(RUN, "failed")
    with pytest.raises(ValueError, match="'paged' is not a valid AlertReason"):
        alert_key(RUN, "paged")


def test_recipients_are_the_team_then_the_owner_each_once():
    config = AlertsConfig.model_validate(
        {"exports_team": ["Team@Example.com", "oncall@example.com"]})
    assert recipients(config, "OWNER@acme.example") == (
        "team@example.com", "oncall@example.com", "owner@acme.example")
    assert recipients(config, "oncall@example.com") == ("team@example.com", "oncall@example.com")
    quiet = AlertsConfig.model_validate({"exports_team": ["t@example.com"],
                                         "notify_owner": False})
    assert recipients(quiet, "owner@acme.example") == ("t@example.com",)


@pytest.mark.parametrize(("data", "match"), [
    ({"exports_team": ["not-an-address"]}, "expected an email address"),
    ({"notifier": {"class": "smtp", "channel": "#x"}}, "Extra inputs are not permitted"),
    ({"pager": True}, "Extra inputs are not permitted"),
])
def test_a_bad_alerts_section_is_refused_naming_the_field(data, match):
    with pytest.raises(ValidationError, match=match):
        AlertsConfig.model_validate(data)


def test_a_bad_notifier_class_is_told_what_is_allowed_not_a_pattern():
    with pytest.raises(ValidationError) as info:
        AlertsConfig.model_validate({"notifier": {"class": "slack", "message_field": "Text"}})
    assert issues_from_validation("defaults.yaml", AlertsConfig, info.value) == [
        "defaults.yaml: notifier.class: 'slack' is not a valid notifier class: use 'smtp' or the "
        "dotted path of an Airflow notifier class (e.g. "
        "airflow.providers.slack.notifications.slack.SlackNotifier)",
        "defaults.yaml: notifier.message_field: 'Text' is not a valid keyword name: use "
        "lower-case letters, digits and '_', not starting with a digit; it names a keyword "
        "argument of the notifier (e.g. text)"]


def test_a_custom_notifier_is_named_by_its_class():
    config = AlertsConfig.model_validate({"notifier": {
        "class": "airflow.providers.slack.notifications.slack.SlackNotifier",
        "message_field": "text", "kwargs": {"slack_conn_id": "slack", "channel": "#exports"}}})
    assert config.notifier.class_.endswith("SlackNotifier")
    assert config.notifier.kwargs == {"slack_conn_id": "slack", "channel": "#exports"}


def test_the_message_names_run_period_reason_and_commands():
    alert = Alert(reason=AlertReason.DELIVERY, company="acme", schedule_id="acme/daily-spend",
                  run_key=RUN, slot=SLOT, period="2026-03-28", destination="sftp-a",
                  detail="delivery to sftp-a is exhausted after 6 attempt(s):\n  auth failed",
                  where="widget_export__acme__daily-spend/scheduled__x/deliver try 6")
    assert alert.key == f"alert:{RUN}:delivery:sftp-a"
    assert alert.subject == "[exports] delivery not made (sftp-a): acme/daily-spend 2026-03-28"
    lines = alert.text().splitlines()
    assert f"run:     {RUN}" in lines
    assert "period:  2026-03-28" in lines
    assert "reason:  delivery to sftp-a is exhausted after 6 attempt(s): auth failed" in lines
    assert "  exportctl explain --schedule acme/daily-spend --date 2026-03-29" in lines
    assert ("  exportctl runs --company acme --schedule acme/daily-spend "
            "--since 2026-03-29T05:00Z --limit 1") in lines
    assert any(line.startswith(f"  exportctl requeue {RUN} --destination sftp-a") for line in lines)
    assert alert.html().startswith("<pre>") and "&lt;" not in alert.html()


def test_a_run_that_failed_before_its_window_says_so():
    alert = Alert(reason=AlertReason.FAILED, company="acme", schedule_id="acme/daily-spend",
                  run_key=RUN, slot=SLOT, detail="x" * 5000)
    assert alert.subject.endswith("slot 2026-03-29T05:00Z")
    assert "period:  not resolved" in alert.text()
    assert len(alert.text()) < 2500  # the detail is cut


def test_a_schema_change_alert_is_keyed_by_the_change_not_the_run():
    from export_lib.ledger.contracts import ContractEntry
    from export_lib.source.export_schema import ExportSchema, SchemaColumn

    entry = ContractEntry(
        schedule_id="acme/daily-spend", company="acme", seq=2, major=1,
        fingerprint="b" * 64, schema=ExportSchema(columns=(SchemaColumn(
            name="value", type="float64", nullable=False),)), change="warn",
        previous_fingerprint="a" * 64, diff=("column value: type decimal(14,2) → float64",),
        run_key=RUN, period="2026-03-28", slot=SLOT, recorded_at=NOW)
    alert = schema_change_alert(entry)
    # Once per change of the schedule: a later run publishing the same schema asks the same key.
    assert alert.key == "alert:acme/daily-spend:schema_change:2"
    assert alert.notice_reason == "schema_change"
    assert alert.subject == ("[exports] published with a changed schema: acme/daily-spend "
                             "2026-03-28")
    lines = alert.text().splitlines()
    assert lines[0] == "Published with a changed schema for acme/daily-spend (company acme)."
    assert ("reason:  the file's schema changed and was published under schema_policy: warn; "
            "it is the schedule's contract now (bbbbbbbbbbbb, was aaaaaaaaaaaa): column value: "
            "type decimal(14,2) → float64") in lines
    assert lines[lines.index("Investigate:") + 1] == "  exportctl schema acme/daily-spend"
    assert lines[-1].startswith("This alert is sent once per schema change")
    # The run-keyed alerts keep their keys and reasons.
    failed = Alert(reason=AlertReason.DELIVERY, company="acme", schedule_id="acme/daily-spend",
                   run_key=RUN, slot=SLOT, detail="x", destination="sftp-a")
    assert (failed.key, failed.notice_reason) == (f"alert:{RUN}:delivery:sftp-a",
                                                  "delivery:sftp-a")


def test_a_notice_is_claimed_once_retaken_after_a_failure_or_a_stale_claim(tmp_path):
    ledger = open_ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.upgrade()
    engine, key = ledger.engine, f"alert:{RUN}:failed"

    def claim(now):
        return claim_notice(engine, key=key, kind="alert", run_key=RUN, reason="failed",
                            recipients="a@x.example", now=now)

    first = claim(NOW)
    assert (first.granted, first.claims) == (True, 1)
    assert claim(NOW).granted is False  # being sent by the first
    fail_notice(engine, key, "SMTP down", NOW)
    assert claim(NOW + timedelta(seconds=1)).granted is True  # a failed send is tried again
    assert claim(NOW + timedelta(minutes=5)).granted is False
    assert claim(NOW + timedelta(minutes=11)).granted is True  # the claimer died: stale
    confirm_notice(engine, key, NOW + timedelta(minutes=11))
    late = claim(NOW + timedelta(days=3))
    assert (late.granted, late.state, late.claims) == (False, "sent", 6)
    (row,) = list_notices(engine, RUN)
    assert (row["state"], row["claims"], row["error"]) == ("sent", 6, None)


def test_metric_names_carry_company_and_schedule_for_plain_statsd():
    assert metric_name("render.rows", "acme", "acme/daily-spend") == \
        "export.render.rows.acme.daily-spend"
    assert metric_name("runs.completed", "acme", "acme/google-ads/primary") == \
        "export.runs.completed.acme.google-ads__primary"
    with pytest.raises(KeyError, match="unknown export metric 'rows'"):
        metric_name("rows", "acme", "acme/daily-spend")
