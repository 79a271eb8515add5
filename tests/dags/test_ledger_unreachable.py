"""Bad input (issue 14): a worker that cannot reach the ledger fails its task with one line that
names EXPORT_LEDGER_URL and no secret, as a retryable error, so Airflow retries the task (no
AirflowFailException, and the retry policies say retry)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from export_lib.errors import LedgerError
from tests.services.ports import free_port


@pytest.mark.parametrize("operator", ["resolve", "publish"])
def test_a_task_that_cannot_reach_the_ledger_fails_retryably_naming_export_ledger_url(
        operator, monkeypatch):
    from airflow.sdk.definitions.retry_policy import RetryAction
    from export_airflow.building.retry_policy import MANUAL_RETRY
    from export_airflow.tasks.operators import PublishOperator, ResolveWindowOperator

    port = free_port()  # nothing listens there
    monkeypatch.setenv("EXPORT_LEDGER_URL",
                       f"postgresql+psycopg://exports:s3cret-pw@127.0.0.1:{port}/exports")
    if operator == "resolve":
        task = ResolveWindowOperator(task_id="resolve_window", schedule_id="acme/daily-spend",
                                     config_dir="dags/config")
    else:
        task = PublishOperator(task_id="publish", rendered={"run_key": "acme/x", "rendered": False})
    with pytest.raises(LedgerError) as info:
        task.execute({"dag_run": SimpleNamespace(run_id="r")})
    message = str(info.value)
    assert message.startswith(f"cannot reach the export ledger at postgresql://127.0.0.1:{port}: "
                              "connection failed: ")
    assert message.endswith("Check EXPORT_LEDGER_URL and that the database is up.")
    assert "\n" not in message and "s3cret-pw" not in message
    assert info.value.retryable
    assert MANUAL_RETRY.evaluate(info.value, 1, 4).action == RetryAction.RETRY
