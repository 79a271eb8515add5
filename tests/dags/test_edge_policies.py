"""Airflow-edge policies without dag.test(): deadline references, catch-up routing, retries,
manual requests, and the deadline alert surviving DAG serialization."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from export_lib.errors import ConfigError, FencingError, SourceError

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize(("run_type", "now", "expected"), [
    ("scheduled", SLOT + timedelta(minutes=1), SLOT),
    ("manual", SLOT + timedelta(hours=1, minutes=59), SLOT),
    ("scheduled", SLOT + timedelta(hours=2), None),      # created after its deadline: catch-up
    ("backfill", SLOT, None),
    ("backfill", SLOT + timedelta(minutes=1), None),
])
def test_deadline_reference_skips_runs_created_after_their_deadline(run_type, now, expected):
    from export_airflow.deadlines import slot_deadline_base

    assert slot_deadline_base(SLOT, run_type, timedelta(hours=2), now) == expected


def test_deadline_alert_survives_dag_serialization(tmp_path):
    from airflow.serialization.serialized_objects import DagSerialization
    from export_airflow.building.dag_factory import company_dags

    from tests.conftest import REPO

    dag = next(d for d in company_dags(REPO / "dags" / "config", "acme")
               if d.dag_id == "widget_export__acme__daily-spend")
    data = DagSerialization.to_dict(dag)
    (alert, risk) = data["dag"]["deadline"]  # the missed deadline, the risk point (ADR 0020)
    blob = str(alert)
    assert "OnTimeSlotDeadline" in blob and "7200.0" in blob
    assert "export_airflow.alerts.ExportAlertNotifier" in blob
    blob = str(risk)
    assert "AtRiskDeadline" in blob and "'schedule_id': 'acme/daily-spend'" in blob
    assert "'reason': 'at_risk'" in blob and "'risk': 'automatic'" in blob
    # The names Browse → Deadlines shows beside "Missed" (ADR 0030): the early warning says it
    # is not a miss.
    assert (alert["name"], risk["name"]) == (
        "delivered within 2:00:00 of the slot",
        "early warning (at risk), not a miss: not yet delivered at half the deadline (or the "
        "median delivery time)")


def test_the_risk_point_alert_follows_at_risk(monkeypatch):
    from export_airflow.deadlines import AtRiskDeadline, deadline_alerts, risk_alert

    from export_lib.config.loader import load_catalog
    from export_lib.config.risk import AtRisk
    from tests.conftest import REPO

    schedule = load_catalog(REPO / "dags" / "config").schedule("acme/daily-spend")
    now = SLOT + timedelta(minutes=5)
    assert AtRiskDeadline(7200.0, after="25%").offset(now) == timedelta(minutes=30)
    assert AtRiskDeadline(7200.0, after="45m").offset(now) == timedelta(minutes=45)
    monkeypatch.setattr("export_airflow.deadlines._median", lambda sid, now: timedelta(minutes=80))
    assert AtRiskDeadline(7200.0, schedule_id="acme/daily-spend").offset(now) == timedelta(
        minutes=80)
    ref = AtRiskDeadline.deserialize_reference(
        AtRiskDeadline(7200.0, "50%", "acme/daily-spend").serialize_reference())
    assert (ref.deadline_seconds, ref.after, ref.schedule_id) == (7200.0, "50%",
                                                                  "acme/daily-spend")
    off = schedule.model_copy(update={"policies": schedule.policies.model_copy(
        update={"at_risk": AtRisk(alert=False)})})
    assert risk_alert(off, "/cfg") is None and len(deadline_alerts(off, "/cfg")) == 1
    assert len(deadline_alerts(schedule, "/cfg")) == 2
    named = {after: risk_alert(schedule.model_copy(update={"policies": schedule.policies
                                                         .model_copy(update={"at_risk": AtRisk(
                                                             after=after)})}), "/cfg").name
             for after in ("25%", "45m")}
    assert named == {
        "25%": "early warning (at risk), not a miss: not yet delivered at 25% of the deadline",
        "45m": "early warning (at risk), not a miss: not yet delivered at 45m after the slot"}


@pytest.mark.parametrize(("run_type", "lag", "pool", "weight"), [
    ("scheduled", timedelta(minutes=5), "export_render", 3),
    # The newest due slot created late (a new company, after an outage) is today's report:
    # not behind another company's backlog in the catch-up pool (seed 001).
    ("scheduled", timedelta(hours=12), "export_render", 3),
    ("backfill", timedelta(minutes=5), "export_catchup", -97),
    ("manual", timedelta(days=3), "export_render", 3),
])
def test_catch_up_renders_move_to_their_own_pool_and_lose_priority(run_type, lag, pool, weight):
    from export_airflow.deploy.cluster_policy import task_instance_mutation_hook

    ti = SimpleNamespace(dag_id="widget_export__acme__daily-spend", task_id="render",
                         pool="export_render", pool_slots=2, priority_weight=3)
    run = SimpleNamespace(run_type=run_type, logical_date=SLOT, queued_at=SLOT + lag)
    task_instance_mutation_hook(ti, run)
    assert (ti.pool, ti.priority_weight) == (pool, weight)
    other = SimpleNamespace(dag_id="widget_export__acme__daily-spend", task_id="publish",
                            pool="default_pool", pool_slots=1, priority_weight=3)
    task_instance_mutation_hook(other, run)
    assert (other.pool, other.priority_weight) == ("default_pool", weight)


@pytest.mark.parametrize(("run_type", "state"), [
    ("scheduled", None), ("backfill", "skipped"), ("manual", "skipped")])
def test_recover_missed_is_created_skipped_outside_scheduled_runs(run_type, state):
    from export_airflow.deploy.cluster_policy import task_instance_mutation_hook

    ti = SimpleNamespace(dag_id="data_export__acme__google-ads__primary", task_id="recover_missed",
                         pool="default_pool", pool_slots=1, priority_weight=1, state=None,
                         start_date=None, end_date=None)
    run = SimpleNamespace(run_type=run_type, logical_date=SLOT, queued_at=SLOT + timedelta(days=3))
    task_instance_mutation_hook(ti, run)
    assert (ti.state, ti.priority_weight) == (state, 1)
    assert (ti.end_date is not None) is (state is not None)


def test_manual_retry_policy_waits_30s_2min_10min_then_fails():
    from airflow.sdk.definitions.retry_policy import RetryAction
    from export_airflow.building.retry_policy import MANUAL_RETRY

    down = SourceError("source demo_source is down")
    decisions = [MANUAL_RETRY.evaluate(down, n, 4) for n in (1, 2, 3, 4)]
    assert [d.retry_delay for d in decisions[:3]] == [
        timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10)]
    assert [d.action for d in decisions] == [RetryAction.RETRY] * 3 + [RetryAction.FAIL]
    stale = MANUAL_RETRY.evaluate(FencingError("stale"), 1, 4)
    assert (stale.action, stale.reason) == (RetryAction.FAIL, "FencingError is not retryable")


def test_manual_request_errors_name_the_field():
    from export_lib.config.manual import parse_request

    base = {"company": "acme", "base_export": "acme/daily-spend", "reason": "audit",
            "window_start": "2026-03-02T00:00:00+01:00", "window_end": "2026-03-01T00:00:00+01:00"}
    with pytest.raises(ConfigError, match=r"manual export form: window_end: "
                                          r"2026-03-01T00:00:00\+01:00 is not after "
                                          r"window_start 2026-03-02T00:00:00\+01:00"):
        parse_request(base)
    with pytest.raises(ConfigError,
                       match=r"manual export form: reason: String should have at least 3"):
        parse_request({**base, "reason": "x", "window_end": "2026-03-03T00:00:00+01:00"})


def test_manual_schedule_only_narrows_configured_destinations():
    from export_lib.config.loader import load_catalog
    from export_lib.config.manual import manual_schedule, parse_request
    from tests.conftest import REPO

    catalog = load_catalog(REPO / "dags" / "config")
    request = parse_request({"company": "acme", "base_export": "acme/daily-spend",
                             "reason": "audit", "window_start": "2026-03-01T00:00:00Z",
                             "window_end": "2026-03-02T00:00:00Z", "destinations": ["sftp-evil"]})
    now = datetime(2026, 3, 30, tzinfo=UTC)
    with pytest.raises(ConfigError, match="sftp-evil"):
        manual_schedule(catalog, request, run_id="manual__1", now=now)
    other = parse_request({"company": "kiwi-outdoors", "base_export": "acme/daily-spend",
                           "reason": "audit", "window_start": "2026-03-01T00:00:00Z",
                           "window_end": "2026-03-02T00:00:00Z"})
    with pytest.raises(ConfigError, match="belongs to company 'acme', not 'kiwi-outdoors'"):
        manual_schedule(catalog, other, run_id="manual__1", now=now)


def test_late_data_policies_shape_the_task_graph(tmp_path):
    import shutil

    import yaml
    from export_airflow.building.dag_factory import company_dags

    from tests.conftest import REPO

    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    data = yaml.safe_load((config / "acme.yaml").read_text())
    data["widget_exports"][0]["late_data"] = {"policy": "restate", "grace": "1d"}
    (config / "acme.yaml").write_text(yaml.safe_dump(data))

    kiwi = {d.dag_id: d for d in company_dags(config, "kiwi-outdoors")}
    waiting = kiwi["widget_export__kiwi-outdoors__business-day-revenue"]
    assert waiting.get_task("wait_for_watermark").downstream_task_ids == {"render"}
    assert waiting.get_task("wait_for_watermark").mode == "reschedule"
    acme = {d.dag_id: d for d in company_dags(config, "acme")}
    restating = acme["widget_export__acme__daily-spend"]
    assert restating.get_task("deliver").downstream_task_ids == {"restate_later"}
    assert "restatement__acme" in acme and "restatement__kiwi-outdoors" not in kiwi
    assert restating.get_task("restate_later").grace_seconds == 86400
    assert restating.max_active_runs == 2  # the restatement waits in a run of its own

    from export_airflow.building.restatement import build_restatement_dag

    restatement = build_restatement_dag(str(config), "acme")
    assert restatement is not None and acme["restatement__acme"].access_control == {
        "company_acme_viewer": {"DAGs": {"can_read"}, "DAG Runs": {"can_read"}},
        "company_acme_operator": {"DAGs": {"can_read", "can_edit"},
                                  "DAG Runs": {"can_read", "can_create"}}}
    assert restatement.get_task("restate_due").downstream_task_ids == {"restate_render"}
    assert restatement.get_task("restate_due").mode == "reschedule"
    assert restatement.get_task("restate_publish").correction is True
    assert restatement.get_task("restate_render").pool == "export_catchup"
    plain = acme["widget_export__acme__hourly-clicks"]
    assert {t.task_id for t in plain.tasks} == {"resolve_window", "render", "publish",
                                                "deliver"}


def test_recover_missed_has_its_own_short_retry_budget(tmp_path):
    from datetime import timedelta as td

    from export_airflow.building.dag_factory import company_dags

    from tests.world import build_world

    world = build_world(tmp_path, days=1)
    dags = {d.dag_id: d for d in company_dags(world.config, "acme")}
    task = dags["widget_export__acme__daily-spend"].task_dict["recover_missed"]
    assert (task.retries, task.retry_delay, task.execution_timeout) == (1, td(minutes=1),
                                                                         td(minutes=10))
    assert "recover_missed" not in dags["widget_export__acme__hourly-clicks"].task_dict  # latest


def test_task_policy_routes_large_renders_and_manual_work_to_their_queues(monkeypatch):
    """Every parsed task of the shipped config gets the queue its channel size asks for:
    dentsu-happiness' large channel renders on exports_large, manual DAGs on exports_manual,
    the rest (acme's medium channel included) on default."""
    from export_airflow.building.dag_factory import company_dags
    from export_airflow.deploy.cluster_policy import task_policy

    from tests.conftest import REPO

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    queues = {}
    for company in ("acme", "dentsu-happiness"):
        for dag in company_dags(REPO / "dags" / "config", company):
            for task in dag.tasks:
                task_policy(task)
                queues[(dag.dag_id, task.task_id)] = task.queue
                assert "pod_override" not in (task.executor_config or {})
    large = {k for k, q in queues.items() if q == "exports_large"}
    assert large == {("data_export__dentsu-happiness__facebook__primary", "render"),
                     ("data_export__dentsu-happiness__facebook__secondary", "render")}
    manual = {k for k, q in queues.items() if q == "exports_manual"}
    assert {dag for dag, _ in manual} == {"manual_export__acme", "manual_export__dentsu-happiness"}
    assert ("manual_export__acme", "deliver") in manual  # mapped tasks too
    assert all(q == "default" for k, q in queues.items() if k not in large | manual)
    assert queues[("widget_export__acme__daily-spend", "render")] == "default"


def test_queue_for_leaves_other_dags_alone():
    from export_airflow.deploy.cluster_policy import queue_for

    assert queue_for("someone_elses_dag", "render", "large") is None
    assert queue_for("widget_export__acme__x", "publish", "large") == "default"
    assert queue_for("data_export__acme__x", "render", "medium") == "default"


def test_large_pod_override_is_a_valid_pod_spec_and_matches_the_documented_yaml():
    """docs/kubernetes/large-render-pod.yaml is the pod_override the policy gives a large
    channel's render under the KubernetesExecutor (kubectl is not installed here; the kubernetes
    client's own model checks the shape when the package is installed)."""
    import yaml
    from export_airflow.deploy.cluster_policy import LARGE_POD_OVERRIDE

    from tests.conftest import REPO

    documented = yaml.safe_load((REPO / "docs" / "kubernetes" / "large-render-pod.yaml").read_text())
    assert documented == LARGE_POD_OVERRIDE
    (container,) = documented["spec"]["containers"]
    assert container["name"] == "base"  # the KubernetesExecutor merges into its "base" container
    assert container["resources"]["limits"]["memory"] == "4Gi"


def test_large_pod_override_deserializes_into_the_kubernetes_model():
    """The V1Pod the executor gets holds every documented field: serialized back it is the
    documented spec (a misspelled or misplaced key would be dropped by the model and differ)."""
    from export_airflow.deploy.cluster_policy import LARGE_POD_OVERRIDE, large_pod_override
    from kubernetes.client import ApiClient, V1Pod

    pod = large_pod_override()
    assert isinstance(pod, V1Pod)
    assert pod.spec.containers[0].name == "base"
    assert pod.spec.containers[0].resources.limits == {"memory": "4Gi"}
    assert pod.spec.containers[0].resources.requests == {"memory": "2Gi", "cpu": "1"}
    assert ApiClient().sanitize_for_serialization(pod) == LARGE_POD_OVERRIDE


def test_a_misspelled_pod_field_does_not_survive_the_kubernetes_model():
    """The round trip above can fail: the model drops what it does not know."""
    import json

    from kubernetes.client import ApiClient, V1Pod

    spec = {"apiVersion": "v1", "kind": "Pod",
            "spec": {"containers": [{"name": "base", "resource": {"limits": {"memory": "4Gi"}}}]}}

    class _Response:
        data = json.dumps(spec)

    pod = ApiClient().deserialize(_Response(), V1Pod)
    assert ApiClient().sanitize_for_serialization(pod) != spec
