"""Which tasks announce on assets and what the example consumer follows (ADR 0024). The events
themselves: tests/dags/test_reruns.py (dag.test) and tests/system/scheduler/test_assets.py (a
real scheduler triggering the consumer)."""

from __future__ import annotations

import runpy

from tests.conftest import REPO


def _task(dag, task_id):
    return dag.get_task(task_id)


def test_publish_announces_through_the_schedules_alias_and_manual_exports_do_not(
        export_world, tmp_path):
    from airflow.sdk import AssetAlias
    from export_airflow.building.dag_factory import company_dags
    from export_airflow.tasks.assets import schedule_asset

    dags = {d.dag_id: d for d in company_dags(tmp_path / "dags" / "config", "acme")}
    assert _task(dags["widget_export__acme__daily-spend"], "publish").outlets == [
        AssetAlias("export-alias:acme/daily-spend")]
    assert _task(dags["data_export__acme__google-ads__primary"], "publish").outlets == [
        AssetAlias("export-alias:acme/google-ads/primary")]
    assert _task(dags["manual_export__acme"], "publish").outlets == []
    # Announcing publishes of one DAG run one at a time: Airflow's first alias→asset link is
    # check-then-insert (two concurrent first announcements failed one publish, 4 Dec).
    assert [_task(dags[d], "publish").max_active_tis_per_dag for d in (
        "widget_export__acme__daily-spend", "data_export__acme__google-ads__primary",
        "manual_export__acme")] == [1, 1, None]
    # deliver reads the announced artifact: the asset is its inlet (registered when parsed).
    assert _task(dags["widget_export__acme__daily-spend"], "deliver").inlets == [
        schedule_asset("acme", "acme/daily-spend")]


def test_restatements_announce_corrections_through_their_own_alias(export_world):
    from airflow.sdk import AssetAlias
    from export_airflow.building.restatement import build_restatement_dag

    dag = build_restatement_dag(str(export_world.config), "acme")
    assert _task(dag, "restate_publish").outlets == [AssetAlias("export-alias:acme/corrections")]
    assert _task(dag, "restate_publish").max_active_tis_per_dag == 1


def test_the_example_consumer_follows_the_asset_publish_announces_on(export_world):
    from airflow.sdk import Asset

    from export_lib.pipeline.asset_events import schedule_asset_uri

    dag = runpy.run_path(str(REPO / "dags" / "example_asset_consumer.py"))["dag"]
    assets = list(dag.timetable.asset_condition.objects)
    # EXPORT_ARTIFACT_ROOT is the world's: the URI publish's events carry in this deployment.
    assert assets == [Asset(name="export:acme/daily-spend",
                            uri=schedule_asset_uri("acme", "acme/daily-spend"))]
    assert assets[0].uri == (export_world.artifacts / "acme" / "daily-spend").resolve().as_uri()
    assert dag.dag_id == "example_asset_consumer"
    assert dag.access_control and set(dag.access_control) == {"company_acme_viewer", "company_acme_operator"}
