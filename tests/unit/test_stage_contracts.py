"""The stages' typed results keep the XCom JSON the dict results had (issue 21, item 6): a DAG
run that started before an upgrade reads its XComs after it, and the UI shows the same keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from export_lib.delivery import DeliveryOutcome
from export_lib.errors import ExportError
from export_lib.periods.windows import ExportWindow
from export_lib.pipeline import (
    AlreadyPublished,
    ArtifactLine,
    DeliverResult,
    DeliveryLine,
    PublishResult,
    Rendered,
    RenderSkipped,
    RunOutcome,
    RunSummary,
    StagingCleanup,
    render_result_from_xcom,
)
from export_lib.pipeline.results import HeldStagingObject, KeptStagingObject, StagingObject
from export_lib.pipeline.retention import (
    ExpiredArtifact,
    HeldArtifact,
    HeldStaging,
    RetentionReport,
    StagingLeftover,
    UndeletableStaging,
)

KEY = "acme/daily-spend/2026-03-29T05:00Z"
START, END = datetime(2026, 3, 27, 23, tzinfo=UTC), datetime(2026, 3, 28, 23, tzinfo=UTC)
SUMMARY_XCOM = {
    "run_key": KEY, "created": True, "state": "registered", "company": "acme",
    "schedule_id": "acme/daily-spend", "slot": "2026-03-29T05:00:00Z",
    "window": {"start": "2026-03-27T23:00:00Z", "end": "2026-03-28T23:00:00Z",
               "timezone": "Europe/Berlin", "kind": "calendar_day"},
    "config_version": "abc123", "deadline": "2026-03-29T07:00:00Z", "artifact_version": None,
    "skip_reason": None, "late_reason": None, "missed_recorded": 0,
    "destinations": ["acme-dir"],
}


def _summary(**window: object) -> RunSummary:
    return RunSummary(
        run_key=KEY, created=True, state="registered", company="acme",
        schedule_id="acme/daily-spend", slot=datetime(2026, 3, 29, 5, tzinfo=UTC),
        window=ExportWindow(**{"start": START, "end": END, "timezone": "Europe/Berlin",
                               "kind": "calendar_day", **window}),
        config_version="abc123", deadline=datetime(2026, 3, 29, 7, tzinfo=UTC),
        destinations=("acme-dir",))


def test_the_run_summary_xcom_is_unchanged_and_reads_back():
    summary = _summary()
    assert summary.as_xcom() == SUMMARY_XCOM
    assert RunSummary.from_xcom(SUMMARY_XCOM) == summary
    assert summary.window.period == "2026-03-28"


def test_the_summary_window_is_an_export_window_with_its_invariants():
    assert _summary(kind="manual").window.kind == "manual"  # a manual export's own window
    backwards = {**SUMMARY_XCOM, "window": {**SUMMARY_XCOM["window"],
                                            "end": "2026-03-26T23:00:00Z"}}
    with pytest.raises(ExportError, match=r"window: Value error, window end .* is before its "
                                          r"start"):
        RunSummary.from_xcom(backwards)
    naive = {**SUMMARY_XCOM, "window": {**SUMMARY_XCOM["window"], "start": "2026-03-27T23:00"}}
    with pytest.raises(ExportError, match=r"window\.start: Value error, window bounds must be "
                                          r"timezone-aware"):
        RunSummary.from_xcom(naive)
    with pytest.raises(ExportError, match=r"window\.kind: Input should be 'calendar_day', "
                                          r"'trailing_days', .* 'interval' or 'manual'\)"):
        RunSummary.from_xcom({**SUMMARY_XCOM, "window": {**SUMMARY_XCOM["window"],
                                                         "kind": "weekly"}})


@pytest.mark.parametrize(("result", "xcom"), [
    pytest.param(Rendered(run_key=KEY, attempt_id="a1", generation=2, rows=10, bytes=300,
                          sha256="f" * 64, columns=("day", "spend")),
                 {"run_key": KEY, "rendered": True, "attempt_id": "a1", "generation": 2,
                  "rows": 10, "bytes": 300, "sha256": "f" * 64, "columns": ["day", "spend"]},
                 id="rendered"),
    pytest.param(AlreadyPublished(run_key=KEY, artifact_version=3, sha256="e" * 64, rows=10),
                 {"run_key": KEY, "rendered": False, "artifact_version": 3, "sha256": "e" * 64,
                  "rows": 10}, id="already-published"),
    pytest.param(RenderSkipped(run_key=KEY, skipped="empty"),
                 {"run_key": KEY, "rendered": False, "skipped": "empty", "rows": 0},
                 id="skipped"),
])
def test_each_render_outcome_keeps_its_xcom_shape_and_reads_back_as_itself(result, xcom):
    assert result.as_xcom() == xcom
    assert list(result.as_xcom()) == list(xcom)  # the same keys in the same order
    back = render_result_from_xcom(xcom)
    assert type(back) is type(result) and back == result
    # read like the dict it was (tests and scripts written against it)
    assert result == xcom and result["run_key"] == KEY and result.get("attempt_id") == \
        xcom.get("attempt_id") and ("skipped" in result) == ("skipped" in xcom)


def test_an_unreadable_render_result_is_an_export_error_naming_the_fields():
    with pytest.raises(ExportError, match=r"the render result handed between tasks is not "
                                          r"readable \(.*Rendered\.attempt_id: Field required"):
        render_result_from_xcom({"run_key": KEY, "rendered": True})
    with pytest.raises(ExportError, match=r"PublishResult handed between tasks is not readable "
                                          r"\(version: Field required"):
        PublishResult.from_xcom({"run_key": KEY, "created": True, "uri": "u", "sha256": "s",
                                 "rows": 1, "bytes": 2})


def test_results_are_frozen_and_refuse_unknown_fields():
    published = PublishResult(run_key=KEY, created=True, version=1, uri="file:///a.csv",
                              sha256="s", rows=1, bytes=2)
    with pytest.raises(ValidationError, match="frozen"):
        published.version = 2
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PublishResult(**published.model_dump(), extra=1)


def test_publish_deliver_and_gc_results_keep_their_xcom_shapes():
    published = PublishResult(run_key=KEY, created=False, version=2, uri="file:///a.csv",
                              sha256="s", rows=1, bytes=2)
    assert published.as_xcom() == {"run_key": KEY, "created": False, "version": 2,
                                   "uri": "file:///a.csv", "sha256": "s", "rows": 1, "bytes": 2}
    outcome = DeliveryOutcome(delivery_id="d1", destination_id="acme-dir",
                              destination_type="local", target="file:///out", state="acknowledged",
                              attempts=1, receipt=None, already_present=True)
    delivered = DeliverResult(run_key=KEY, destination="acme-dir", **outcome.as_xcom())
    assert delivered.as_xcom() == {"run_key": KEY, "destination": "acme-dir",
                                   **outcome.as_xcom()}
    assert DeliverResult.from_xcom(delivered.as_xcom()) == delivered
    gc = StagingCleanup(cleaned=(StagingObject(attempt_id="a", run_key=KEY, uri="u1"),),
                        kept=(KeptStagingObject(attempt_id="b", run_key=KEY, uri="u2",
                                                error="denied"),),
                        held=(HeldStagingObject(attempt_id="c", run_key=KEY, uri="u3",
                                                reason="legal hold"),))
    assert gc.as_xcom() == {
        "cleaned": [{"attempt_id": "a", "run_key": KEY, "uri": "u1"}],
        "kept": [{"attempt_id": "b", "run_key": KEY, "uri": "u2", "error": "denied"}],
        "held": [{"attempt_id": "c", "run_key": KEY, "uri": "u3", "reason": "legal hold"}]}
    assert StagingCleanup() == {"cleaned": [], "kept": [], "held": []}


def test_exportctl_run_json_keeps_skipped_only_when_skipped():
    done = RunOutcome(run_key=KEY, state="ready", window_start_utc="a", window_end_utc="b",
                      artifact=ArtifactLine(uri="u", version=1, sha256="s", rows=3),
                      deliveries=(DeliveryLine(destination="acme-dir", state="acknowledged"),))
    assert done.as_xcom() == {"run_key": KEY, "state": "ready", "window_start_utc": "a",
                              "window_end_utc": "b",
                              "artifact": {"uri": "u", "version": 1, "sha256": "s", "rows": 3},
                              "deliveries": [{"destination": "acme-dir",
                                              "state": "acknowledged"}]}
    skipped = RunOutcome(run_key=KEY, state="skipped", window_start_utc="a",
                         window_end_utc="b", skipped="paused")
    assert list(skipped.as_xcom()) == ["run_key", "state", "window_start_utc", "window_end_utc",
                                       "skipped", "artifact", "deliveries"]


def test_the_retention_report_json_keeps_its_shape():
    expired = ExpiredArtifact(artifact_id=7, company="acme", schedule_id="acme/daily-spend",
                              run_key=KEY, version=1, uri="file:///a.csv",
                              generated_at="2026-03-29T05:10Z", retention_days=30)
    report = RetentionReport(
        dry_run=False, deleted=[expired],
        kept=[HeldArtifact(**expired.model_dump(), reason="legal hold")],
        failed=[UndeletableStaging(attempt_id="a", run_key=KEY, uri="u", error="denied")],
        staging_deleted=[StagingLeftover(attempt_id="b", run_key=KEY, uri="v")],
        staging_kept=[HeldStaging(attempt_id="c", run_key=KEY, uri="w", reason="legal hold")])
    item = expired.as_xcom()
    assert report.as_dict() == {
        "dry_run": False, "deleted": [item], "kept": [{**item, "reason": "legal hold"}],
        "failed": [{"attempt_id": "a", "run_key": KEY, "uri": "u", "error": "denied"}],
        "staging_deleted": [{"attempt_id": "b", "run_key": KEY, "uri": "v"}],
        "staging_kept": [{"attempt_id": "c", "run_key": KEY, "uri": "w", "reason": "legal hold"}]}
