"""The ledger is an Airflow connection (issue 24 item 5): ``export_ledger`` wins over
``EXPORT_LEDGER_URL`` (which stays for the CLI), through Airflow's own lookup (here its
environment backend, ``AIRFLOW_CONN_EXPORT_LEDGER``); one ledger per process; a forked child
never reuses its parent's."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from types import SimpleNamespace

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)


def _connection_ledger(tmp_path, monkeypatch) -> str:
    from export_lib.ledger import open_ledger

    path = tmp_path / "connection-ledger.db"
    ledger = open_ledger(f"sqlite:///{path}")
    ledger.upgrade()
    ledger.engine.dispose()
    monkeypatch.setenv("AIRFLOW_CONN_EXPORT_LEDGER",
                       json.dumps({"conn_type": "sqlite", "host": str(path)}))
    return f"sqlite:///{path}"


def test_a_task_registers_its_run_in_the_connections_ledger(export_world, tmp_path, monkeypatch):
    from export_airflow.runtime.ledger import task_ledger
    from export_airflow.tasks.operators import ResolveWindowOperator

    from export_lib.ledger import open_ledger

    url = _connection_ledger(tmp_path, monkeypatch)
    assert task_ledger().url == url and task_ledger() is task_ledger()
    task = ResolveWindowOperator(task_id="resolve_window", schedule_id="acme/daily-spend",
                                 config_dir=str(export_world.config))
    ti = SimpleNamespace(dag_id="widget_export__acme__daily-spend", run_id="r",
                         task_id="resolve_window", try_number=1)
    summary = task.execute({"dag_run": SimpleNamespace(run_id="r", run_after=SLOT, conf={},
                                                       run_type="scheduled"),
                            "logical_date": SLOT, "ti": ti})
    assert summary["run_key"] == "acme/daily-spend/2026-03-29T05:00Z"
    assert open_ledger(url).get_run(summary["run_key"]) is not None
    assert open_ledger(export_world.ledger_url).get_run(summary["run_key"]) is None


def test_without_the_connection_the_environment_decides(export_world, monkeypatch):
    from export_airflow.runtime.ledger import task_ledger

    monkeypatch.delenv("AIRFLOW_CONN_EXPORT_LEDGER", raising=False)
    assert task_ledger().url == export_world.ledger_url


def test_the_pages_read_the_same_connection(airflow_db, export_world, tmp_path, monkeypatch):
    from export_airflow.runtime.ledger import server_ledger

    url = _connection_ledger(tmp_path, monkeypatch)
    assert server_ledger().url == url and server_ledger() is server_ledger()


def test_a_forked_child_opens_its_own(export_world, tmp_path, monkeypatch):
    from export_airflow.runtime import ledger as module

    module.task_ledger()
    assert module._OPEN
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's is kept
        os._exit(0 if not module._OPEN else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert module._OPEN  # the parent's stays


def test_alerts_and_the_risk_point_read_the_connections_ledger(export_world, tmp_path,
                                                               monkeypatch):
    """The failure and deadline notifiers deduplicate in the ledger the runs are in: with only
    the connection pointing at it, not in EXPORT_LEDGER_URL's (a second ledger)."""
    from export_airflow import alerts
    from export_airflow.runtime.ledger import callback_ledger

    url = _connection_ledger(tmp_path, monkeypatch)
    assert url != export_world.ledger_url
    assert alerts._ledger().url == url
    assert callback_ledger().url == url and callback_ledger() is alerts._ledger()


def test_a_callback_where_no_connection_lookup_answers_uses_the_environment(
        export_world, tmp_path, monkeypatch):
    from export_airflow.runtime import ledger

    _connection_ledger(tmp_path, monkeypatch)

    def refused() -> str:
        raise RuntimeError("no supervisor to ask")

    monkeypatch.setattr(ledger, "_task_connection_url", refused)
    monkeypatch.setattr(ledger, "_server_connection_url", refused)
    assert ledger.callback_ledger().url == export_world.ledger_url
