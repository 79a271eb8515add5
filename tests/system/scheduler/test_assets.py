"""Published exports as Airflow Assets on a real scheduler (issue 24 item 1, ADR 0024).

assetco's daily export publishes its newest due slot at once; a consumer DAG scheduled on the
schedule's asset (``export_airflow.tasks.assets.consumer_dag``, as ``dags/example_asset_consumer.py``
follows acme in ``make run``) runs once, and the event's extra is the manifest's. Clearing
publish and deliver makes no second event and no second consumer run; a late row and a
regenerated run publish v2, one more event and one more consumer run.
"""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
import pytest

from tests.system.scheduler.harness import SchedulerStack, SlotClock, company_file, widget_export
from tests.system.soak.stack import wait_for

COMPANY = "assetco"
DAG = "widget_export__assetco__daily"
CONSUMER = "consumer__assetco__daily"
ASSET = "export:assetco/daily"
SHARED = ("run_key", "company", "schedule", "period", "timezone", "window_start_utc",
          "window_end_utc", "config_version", "version", "supersedes", "correction", "rows",
          "bytes", "sha256", "format", "generated_at")


def COMPANIES(clock: SlotClock) -> dict[str, dict]:  # noqa: N802 (the fixture's name for it)
    return {COMPANY: company_file(COMPANY, [widget_export("daily", export_hour=clock.hour,
                                                          company=COMPANY)])}


def prepare_stack(stack: SchedulerStack) -> None:
    """The consumer's DAG file, parsed before the export can publish: an event only triggers
    the DAGs scheduled on its asset when it happens."""
    (stack.root / "dags" / f"consumer_{COMPANY}.py").write_text(
        "from export_airflow.tasks.assets import consumer_dag\n\n"
        f'dag = consumer_dag("{COMPANY}", "{COMPANY}/daily")\n')
    stack.wait_for_dags(CONSUMER, timeout=180)


@pytest.fixture(scope="module")
def stack(scheduler_stack: SchedulerStack) -> SchedulerStack:
    yield scheduler_stack
    (scheduler_stack.root / "dags" / f"consumer_{COMPANY}.py").unlink(missing_ok=True)
    scheduler_stack.pause(CONSUMER)


def _events(stack: SchedulerStack) -> list[dict]:
    api = stack._api()
    assets = api.ok("GET", f"/api/v2/assets?name_pattern={ASSET}&limit=10")["assets"]
    mine = [a for a in assets if a["name"] == ASSET]
    if not mine:
        return []
    return api.ok("GET", f"/api/v2/assets/events?asset_id={mine[0]['id']}&order_by=timestamp"
                         "&limit=50")["asset_events"]


def _consumer_runs(stack: SchedulerStack, count: int) -> list[dict]:
    """Once the consumer has ``count`` runs and every one of them succeeded."""
    def done() -> list[dict] | None:
        runs = stack.dag_runs(CONSUMER)
        return runs if len(runs) >= count and all(
            r["state"] == "success" for r in runs) else None

    return wait_for(done, 180, interval=2, what=f"{count} successful run(s) of {CONSUMER}")


def test_one_new_version_is_one_event_and_one_consumer_run(stack, clock):
    run_id = stack.wait_for_run_id(DAG)
    stack.wait_for_run(DAG, run_id)
    (event,) = _events(stack)
    (run,) = _consumer_runs(stack, 1)
    assert run["run_type"] == "asset_triggered"

    # From the store, not from the extra's manifest_uri: the REST API masks every value that
    # contains a secret, and this stack's database password ("exports") is in its paths.
    (path,) = (stack.artifact_root / COMPANY / "daily").glob("*__v1.csv.manifest.json")
    manifest = json.loads(path.read_text())
    assert {k: event["extra"][k] for k in SHARED} == {k: manifest[k] for k in SHARED}
    assert (event["extra"]["version"], event["extra"]["correction"]) == (1, False)
    assert event["extra"]["run_key"] == f"{COMPANY}/daily/{clock.newest:%Y-%m-%dT%H:%MZ}"
    assert event["source_dag_id"] == DAG and event["source_run_id"] == run_id
    assert event["name"] == ASSET
    # The consumer checked the announced file (sha256 and size) and returned what it loaded.
    loaded = stack._api().ok("GET", f"/api/v2/dags/{CONSUMER}/dagRuns/{run['dag_run_id']}"
                                    "/taskInstances/load/xcomEntries/return_value")["value"]
    assert [(x["period"], x["version"], x["sha256"]) for x in loaded] == [
        (manifest["period"], 1, manifest["sha256"])]


def test_clearing_publish_announces_nothing_again(stack):
    run_id = stack.wait_for_run_id(DAG)
    assert stack.clear(DAG, run_id, ["publish"], downstream=True) == ["deliver[0]", "publish"]
    stack.wait_for_clear(DAG, run_id)
    assert stack.task_instance(DAG, run_id, "publish")["try_number"] >= 2
    # The event would have been recorded with publish's success: there is none.
    assert len(_events(stack)) == 1
    assert len(stack.dag_runs(CONSUMER)) == 1


def test_a_regenerated_period_with_new_rows_is_v2_and_a_second_consumer_run(stack, clock):
    slot = clock.newest
    # Noon of the window's day (UTC, naive like the column); ingested then too, so a cut-off
    # by ingestion time keeps it: the row was missing, not late.
    noon = slot.replace(hour=0, minute=0, tzinfo=None) - timedelta(hours=12)
    with psycopg.connect(stack.env["AIRFLOW_CONN_DEMO_SOURCE"], autocommit=True) as conn:
        conn.execute("INSERT INTO widget_metrics (company_id, widget_id, event_time, value, "
                     "ingested_at) VALUES (%s, 'missing', %s, 1.23, %s)", (COMPANY, noon, noon))
    # A manual trigger shortly after the slot is that slot's run (the trigger form's regenerate).
    again = stack.trigger(DAG, slot + timedelta(minutes=5), conf={"regenerate": True})
    stack.wait_for_run(DAG, again)
    first, second = _events(stack)
    assert (second["extra"]["version"], second["extra"]["supersedes"],
            second["extra"]["rows"]) == (2, 1, first["extra"]["rows"] + 1)
    assert second["extra"]["period"] == first["extra"]["period"]
    runs = _consumer_runs(stack, 2)
    assert len(runs) == 2
