"""The deliver tasks' retry policy agrees with the ledger (ADR 0005): 10 minutes doubling, at
most 6 h apart, the last try landing when the delivery's window closes; exhaustion is the
ledger's (a non-retryable error fails the task)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from export_lib.errors import DeliveryError

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def _policy():
    from export_airflow.building.retry_policy import delivery_policy

    return delivery_policy()


def test_defaults_back_off_from_10_minutes_to_6_hours_and_outlast_5_days(monkeypatch) -> None:
    monkeypatch.delenv("EXPORT_DELIVERY_RETRY_BASE_SECONDS", raising=False)
    monkeypatch.delenv("EXPORT_DELIVERY_RETRY_CAP_SECONDS", raising=False)
    monkeypatch.delenv("EXPORT_RETRY_DELAY_SECONDS", raising=False)
    policy = _policy()
    far = NOW + timedelta(days=5)
    waits = [policy.delay(n, far, NOW).total_seconds() / 60 for n in range(1, 9)]
    assert waits == [10, 20, 40, 80, 160, 320, 360, 360]
    retries = policy.retries_for(timedelta(days=5))
    total = sum((policy.delay(n, None, NOW) for n in range(1, retries + 1)), timedelta(0))
    assert retries == 26 and total >= timedelta(days=5)


def test_the_longest_retry_window_never_overflows_the_backoff(monkeypatch) -> None:
    """retry_window may be 30 days: 126 tries of 10 min doubling, 6 h apart. Doubling past the
    cap computed 10 min * 2**40 from the 42nd try on, which no timedelta holds (OverflowError:
    the DAG of any destination with retry_window >= 10d failed to import)."""
    from export_airflow.building.retry_policy import DeliveryWindowPolicy

    policy = DeliveryWindowPolicy(timedelta(minutes=10), timedelta(hours=6))
    assert policy.retries_for(timedelta(days=30)) == 126
    assert policy.delay(125, None, NOW) == timedelta(hours=6)
    short = DeliveryWindowPolicy(timedelta(minutes=2), timedelta(hours=1))
    assert short.retries_for(timedelta(days=30)) == 725
    assert short.delay(3, None, NOW) == timedelta(minutes=8)


def test_the_last_retry_lands_when_the_window_closes() -> None:
    policy = _policy()
    closes = NOW + timedelta(minutes=7)
    assert policy.delay(6, closes, NOW) == timedelta(minutes=7, seconds=1)
    soon = datetime.now(UTC) + timedelta(minutes=7)  # evaluate() reads the worker's clock
    error = DeliveryError("HTTP 503", retryable=True, retry_until=soon)
    decision = policy.evaluate(error, 6, 30)
    assert decision.action.value == "retry"
    assert timedelta(minutes=6) < decision.retry_delay <= timedelta(minutes=7, seconds=1)
    assert "window closes" in decision.reason


def test_an_exhausted_delivery_fails_the_task_at_once() -> None:
    decision = _policy().evaluate(DeliveryError("exhausted", retryable=False), 3, 30)
    assert decision.action.value == "fail"


def test_the_harness_retry_delay_shortens_deliveries_too(monkeypatch) -> None:
    monkeypatch.delenv("EXPORT_DELIVERY_RETRY_BASE_SECONDS", raising=False)
    monkeypatch.setenv("EXPORT_RETRY_DELAY_SECONDS", "5")
    assert _policy().base.total_seconds() == 5


def test_test_settings_shorten_the_schedule(monkeypatch) -> None:
    monkeypatch.setenv("EXPORT_DELIVERY_RETRY_BASE_SECONDS", "3")
    monkeypatch.setenv("EXPORT_DELIVERY_RETRY_CAP_SECONDS", "5")
    policy = _policy()
    assert [policy.delay(n, None, NOW).total_seconds() for n in (1, 2, 3)] == [3, 5, 5]


def test_an_edit_with_a_future_effective_from_no_longer_holds_the_dag(tmp_path) -> None:
    """With the earlier version kept under ``history``, the DAG starts at the first version
    (here: no start), not at the edit's effective_from (ADR 0005)."""
    import shutil

    from export_airflow.building.dag_factory import EPOCH, company_dags

    from export_lib.config.loader import load_catalog
    from tests.conftest import REPO
    from tests.unit.time.test_config_versions import ANCHOR, EDIT

    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    before = load_catalog(config).schedule("acme/daily-spend").config_version[:12]
    path = config / "acme.yaml"
    path.write_text(path.read_text().replace(ANCHOR, EDIT, 1))
    dag = {d.dag_id: d for d in company_dags(config, "acme")}["widget_export__acme__daily-spend"]
    assert dag.start_date == EPOCH
    assert f"from 2026-12-01T00:00+0100; earlier: `{before}`" in dag.doc_md
