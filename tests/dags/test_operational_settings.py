"""The DAG factory applies an export's operational settings (ADR 0015) to its tasks — retries,
timeouts, the watermark sensor's poke interval, ``recover_missed``'s lookback and each
destination's delivery retry pacing — and falls back to the deployment's environment
variables, then to the seed defaults, for what the export leaves out."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.dags.test_integrity import DAGS, _dag_bag

DAILY = "widget_export__acme__daily-spend"
ANCHOR = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
TUNED = """\
      - {id: acme-dir, type: local, path: outbox/acme/daily-spend, retry: {base: 1m, cap: 2h}}
      - {id: partner, type: local, path: outbox/acme/partner}
    retries: {count: 3, delay: 30s, max_delay: 4m}
    timeouts: {resolve: 2m, sensor: 3m, render: 10m, publish: 4m, deliver: 90m, small: 1m}
    catchup: {lookback: 0s}
    late_data: {policy: wait_for_watermark, poke_interval: 45s}
"""
ENV = {"EXPORT_RETRIES": "4", "EXPORT_RETRY_DELAY_SECONDS": "7",
       "EXPORT_MAX_RETRY_DELAY_SECONDS": "60", "EXPORT_TIMEOUT_RENDER": "20m",
       "EXPORT_TIMEOUT_DELIVER": "25m", "EXPORT_WATERMARK_POKE_SECONDS": "12",
       "EXPORT_CATCHUP_LOOKBACK_HOURS": "3", "EXPORT_DELIVERY_RETRY_BASE_SECONDS": "5",
       "EXPORT_DELIVERY_RETRY_CAP_SECONDS": "50"}
KNOB_VARS = (*ENV, *(f"EXPORT_TIMEOUT_{k}" for k in ("RESOLVE", "SENSOR", "PUBLISH", "SMALL")))
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_deployment_settings(monkeypatch):
    for name in KNOB_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(DAGS / "config", target)
    return target


def _tune(config: Path, new: str, old: str = ANCHOR) -> None:
    path = config / "acme.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _dag(config: Path, dag_id: str = DAILY):
    from export_airflow.building.dag_factory import company_dags

    return next(d for d in company_dags(config, "acme") if d.dag_id == dag_id)


def _retries(task) -> tuple:
    return task.retries, task.retry_delay, task.max_retry_delay


def test_an_exports_own_settings_reach_its_tasks_over_the_deployments(config, monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    _tune(config, TUNED)
    tasks = _dag(config).task_dict

    own = (3, timedelta(seconds=30), timedelta(minutes=4))
    for task_id in ("resolve_window", "wait_for_watermark", "render", "publish"):
        assert _retries(tasks[task_id]) == own, task_id
        assert tasks[task_id].retry_exponential_backoff == 2.0
    timeouts = {t: tasks[t].execution_timeout for t in
                ("resolve_window", "wait_for_watermark", "render", "publish")}
    assert timeouts == {"resolve_window": timedelta(minutes=2),
                        "wait_for_watermark": timedelta(minutes=3),
                        "render": timedelta(minutes=10), "publish": timedelta(minutes=4)}
    assert tasks["wait_for_watermark"].poke_interval == 45
    assert tasks["recover_missed"].lookback_seconds == 0  # 0 is a value: no look back
    deliver = tasks["deliver"].partial_kwargs
    assert deliver["execution_timeout"] == timedelta(minutes=90)
    policy = deliver["retry_policy"]
    assert policy.pacing("acme-dir") == (timedelta(minutes=1), timedelta(hours=2))
    assert policy.pacing("partner") == (timedelta(seconds=5), timedelta(seconds=50))  # env
    # enough retries for the destination that needs most to outlast its 5-day window
    window = timedelta(days=5)
    assert policy.retries_for(window, "acme-dir") == 67  # 1, 2, … 64 min, then every 2 h
    assert deliver["retries"] == policy.retries_for(window, "partner") == 8644  # every 50 s


def test_what_an_export_leaves_out_is_the_deployments_environment(config, monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    _tune(config, ANCHOR + "    retries: {count: 2}\n"
                           "    late_data: {policy: wait_for_watermark}\n")
    tasks = _dag(config).task_dict

    assert _retries(tasks["render"]) == (2, timedelta(seconds=7), timedelta(seconds=60))
    assert tasks["render"].execution_timeout == timedelta(minutes=20)
    assert tasks["publish"].execution_timeout == timedelta(minutes=30)  # no env: seed
    assert tasks["wait_for_watermark"].poke_interval == 12
    assert tasks["recover_missed"].lookback_seconds == 3 * 3600
    deliver = tasks["deliver"].partial_kwargs
    assert deliver["execution_timeout"] == timedelta(minutes=25)
    assert deliver["retry_policy"].pacing("acme-dir") == (timedelta(seconds=5),
                                                          timedelta(seconds=50))
    assert (deliver["retry_delay"], deliver["max_retry_delay"]) == (timedelta(seconds=5),
                                                                    timedelta(seconds=50))


def test_without_settings_or_environment_the_seed_defaults_apply(config):
    _tune(config, ANCHOR + "    late_data: {policy: wait_for_watermark}\n")
    tasks = _dag(config).task_dict

    assert _retries(tasks["render"]) == (11, timedelta(minutes=10), timedelta(days=1))
    assert tasks["render"].execution_timeout == timedelta(hours=1)
    assert tasks["wait_for_watermark"].poke_interval == 300
    assert tasks["recover_missed"].lookback_seconds == 48 * 3600
    deliver = tasks["deliver"].partial_kwargs
    assert deliver["retry_policy"].pacing("acme-dir") == (timedelta(minutes=10),
                                                          timedelta(hours=6))
    assert deliver["retries"] == 26


def test_defaults_yaml_settings_apply_to_every_export_of_every_company(config):
    defaults = config / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace(
        "  skip_empty: false\n", "  skip_empty: false\n  retries: {count: 1, delay: 5s}\n"
        "  timeouts: {render: 7m}\n", 1))
    for dag_id in (DAILY, "data_export__acme__google-ads__primary"):
        render = _dag(config, dag_id).task_dict["render"]
        assert (render.retries, render.retry_delay, render.execution_timeout) == (
            1, timedelta(seconds=5), timedelta(minutes=7)), dag_id


def test_the_deliver_policy_paces_each_destination_by_its_own_retry(config):
    _tune(config, TUNED)
    policy = _dag(config).task_dict["deliver"].partial_kwargs["retry_policy"]
    far = NOW + timedelta(days=5)

    def waits(destination: str) -> list[float]:
        return [policy.delay(n, far, NOW, destination).total_seconds() / 60 for n in range(1, 10)]

    assert waits("acme-dir") == [1, 2, 4, 8, 16, 32, 64, 120, 120]
    assert waits("partner") == [10, 20, 40, 80, 160, 320, 360, 360, 360]
    # evaluate() finds the mapped task's destination in the context Airflow passes
    soon = datetime.now(UTC) + timedelta(days=1)
    from export_lib.errors import DeliveryError

    error = DeliveryError("SFTP refused", retryable=True, retry_until=soon)
    decision = policy.evaluate(error, 3, 70, {"task": SimpleNamespace(destination_id="acme-dir")})
    assert (decision.action.value, decision.retry_delay) == ("retry", timedelta(minutes=4))
    assert policy.evaluate(error, 3, 70, None).retry_delay == timedelta(minutes=40)


def test_the_newest_version_with_a_destination_decides_its_pacing(config):
    _tune(config, ANCHOR + "    effective_from: 2026-12-01T00:00:00+01:00\n"
                           "    history:\n"
                           "      - destinations:\n"
                           "          - {id: acme-dir, type: local, path: outbox/acme/daily-spend,"
                           " retry: {base: 3m}}\n"
                           "          - {id: old, type: local, path: outbox/acme/old,"
                           " retry: {base: 2m, cap: 1h}}\n")
    policy = _dag(config).task_dict["deliver"].partial_kwargs["retry_policy"]
    assert policy.pacing("acme-dir") == (timedelta(minutes=10), timedelta(hours=6))  # current
    assert policy.pacing("old") == (timedelta(minutes=2), timedelta(hours=1))  # history only


def test_the_policy_survives_serialization_with_its_destinations():
    from export_airflow.building.retry_policy import DeliveryWindowPolicy

    policy = DeliveryWindowPolicy(timedelta(minutes=10), timedelta(hours=6),
                                  {"sftp": (timedelta(minutes=30), timedelta(hours=12))})
    again = DeliveryWindowPolicy.deserialize(policy.serialize())
    assert (again.base, again.cap, again.destinations) == (policy.base, policy.cap,
                                                           policy.destinations)
    # a policy serialized before per-destination pacing existed
    old = DeliveryWindowPolicy.deserialize({"base": 600.0, "cap": 21600.0})
    assert old.destinations == {} and old.pacing("any") == (timedelta(minutes=10),
                                                           timedelta(hours=6))


def test_recover_missed_uses_its_schedules_lookback(config, monkeypatch):
    """execute() hands the task's lookback to the recovery range (no API: the previous slot
    is None, so the range is the lookback alone)."""
    import export_airflow.tasks.recovery as recovery

    monkeypatch.setenv("EXPORT_CATCHUP_LOOKBACK_HOURS", "100")
    _tune(config, ANCHOR + "    catchup: {lookback: 48h}\n")
    task = _dag(config).task_dict["recover_missed"]
    asked: list[timedelta] = []

    class Api:
        def previous_automated_slot(self, dag_id, slot):
            return None

        def request_backfill(self, dag_id, slots):
            return SimpleNamespace(deferred=False, created=[], describe=lambda: "none")

    def recovery_range(timing, slot, *, previous, lookback, effective_from):
        asked.append(lookback)
        return None

    monkeypatch.setattr(recovery, "api_from_airflow", Api)
    monkeypatch.setattr("export_lib.periods.recovery.recovery_range", recovery_range)
    run = SimpleNamespace(run_type="scheduled", logical_date=NOW, dag_id=DAILY)
    assert task.execute({"dag_run": run}) == {"backfill_id": None, "missed": 0}
    assert asked == [timedelta(hours=48)]


def test_a_company_file_with_every_setting_parses_in_a_dag_bag(tmp_path):
    dags = tmp_path / "dags"
    shutil.copytree(DAGS, dags, ignore=shutil.ignore_patterns("__pycache__"))
    _tune(dags / "config", TUNED)
    bag = _dag_bag(dags / "company_acme.py")
    assert bag.import_errors == {}
    assert bag.dags[DAILY].task_dict["render"].execution_timeout == timedelta(minutes=10)

