"""A timing edited by hand without ``effective_from`` is refused at parse as ``exportctl
validate`` refuses it (issue 22 item 2): otherwise Airflow schedules the new timing's past slot
the moment the file is saved, whatever validate says. The fix it names makes the DAG load with
the new timing from that slot; a worker's parse (one DAG, the run's captured snapshot) is not
stopped by it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pendulum
import pytest
from airflow.timetables.base import DataInterval, TimeRestriction
from export_airflow.dag_factory import company_dags

from export_lib.errors import ConfigError
from tests.world import DAILY, build_world

LAST = "2026-03-28T06:00Z"  # 07:00 CET, acme/daily-spend's newest run


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture()
def world(tmp_path, monkeypatch):
    world = build_world(tmp_path / "w", days=6).use(monkeypatch)
    assert world.run(DAILY, LAST)["state"] == "ready"
    return world


def test_a_hand_edited_export_hour_is_an_import_error_until_it_has_effective_from(world):
    acme = world.config / "acme.yaml"
    acme.write_text(acme.read_text().replace("    export_hour: 7 ", "    export_hour: 9 ", 1))
    with pytest.raises(ConfigError, match=(
            r"acme\.yaml: widget_exports\[0\]: the timing of acme/daily-spend changed "
            r"\(export_hour 7 → 9\) but it already ran under the old timing \(newest run "
            r"acme/daily-spend/2026-03-28T06:00Z\).*add 'effective_from: ")):
        company_dags(world.config, "acme")
    # A worker running a task of a run registered before the edit still gets its DAG.
    (worker,) = company_dags(world.config, "acme", only_dag="widget_export__acme__daily-spend")
    assert worker.dag_id == "widget_export__acme__daily-spend"

    # The lines it names (effective_from after the last run, the old hour in history) fix it.
    acme.write_text(acme.read_text().replace(
        "    interval_hours: 24\n", "    interval_hours: 24\n    effective_from: "
        "2026-03-29T08:00:00Z\n    history:\n      - {export_hour: 7}\n", 1))
    dag = next(d for d in company_dags(world.config, "acme")
               if d.dag_id == "widget_export__acme__daily-spend")
    after_last = dag.timetable.next_run_info(
        DataInterval.exact(pendulum.instance(_at(LAST))),
        TimeRestriction(None, None, True), now=_at(LAST) + timedelta(hours=1))
    # Before effective_from the old hour holds: 07:00 CEST (Berlin moves to CEST that night);
    # from it on, 09:00 (the next day's, 07:00Z).
    assert after_last.logical_date == _at("2026-03-29T05:00Z")
    assert dag.timetable.next_run_info(
        DataInterval.exact(after_last.data_interval.start), TimeRestriction(None, None, True),
        now=_at("2026-03-29T06:00Z")).logical_date == _at("2026-03-30T07:00Z")
