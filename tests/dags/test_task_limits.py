"""No runaway work at the Airflow edge: every task of every shipped DAG has an
``execution_timeout``, and the render's ``on_kill`` cancels the query it runs on the source."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

from export_lib.errors import ConfigError, SourceError
from export_lib.render.copy import CopyOut
from export_lib.source.connections import parse_connection
from export_lib.source.database import open_source
from tests.dags.test_integrity import DAGS, _dag_bag


def _timeout(task) -> timedelta | None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    if isinstance(task, MappedOperator):
        return task.partial_kwargs.get("execution_timeout")
    return task.execution_timeout


def test_every_shipped_task_has_an_execution_timeout():
    bag = _dag_bag(DAGS)
    missing = [f"{dag_id}.{task.task_id}" for dag_id, dag in bag.dags.items()
               for task in dag.tasks if not _timeout(task)]
    assert not missing, f"tasks without execution_timeout: {missing}"
    render = bag.dags["widget_export__acme__daily-spend"].get_task("render")
    assert render.execution_timeout == timedelta(hours=1)
    assert {d for d in bag.dags} >= {"manual_export__acme", "export_retention"}
    assert bag.dags["export_retention"].get_task("apply_retention").execution_timeout
    # No demo export restates late data, so no restatement DAG ships with them: built here.
    from export_airflow.building.restatement import build_restatement_dag

    restatement = build_restatement_dag(str(DAGS / "config"), "acme")
    assert [t.task_id for t in restatement.tasks if not _timeout(t)] == []


def test_timeouts_are_configurable_and_checked(monkeypatch):
    from export_airflow.tasks.limits import task_timeout

    monkeypatch.setenv("EXPORT_TIMEOUT_RENDER", "1h30m")
    assert task_timeout("render") == timedelta(minutes=90)
    monkeypatch.setenv("EXPORT_TIMEOUT_DELIVER", "soon")
    with pytest.raises(ConfigError, match=r"EXPORT_TIMEOUT_DELIVER: 'soon' is not a duration; "
                                          r"use e.g. '2h'"):
        task_timeout("deliver")


def test_render_on_kill_cancels_the_running_copy(postgres_server):
    """on_kill runs while execute() reads (Airflow calls it from its SIGTERM handler or after
    a timeout): the COPY ends with the cancel and the backend runs nothing any more."""
    from export_airflow.tasks.operators import RenderCsvOperator

    op = RenderCsvOperator(task_id="render", run={})
    outcome: list[BaseException] = []
    started = threading.Event()
    pids: list[int] = []

    def read() -> None:
        with open_source(parse_connection("src", postgres_server.dsn)) as source:
            pids.append(source.connection.info.backend_pid)
            try:
                with source.guarded("rendering"), CopyOut(
                        source.connection, b"COPY (SELECT pg_sleep(60)) TO STDOUT") as copy:
                    started.set()
                    list(copy.chunks())
            except BaseException as exc:
                outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(10) or time.sleep(0.5) is None
    time.sleep(0.3)
    op.on_kill()
    reader.join(10)
    assert not reader.is_alive()
    (error,) = outcome
    assert isinstance(error, SourceError)
    assert "cancelled (Airflow stopped task render)" in str(error)
    # The reader closed its connection; the server ends that backend when it reads the
    # closed socket, a moment later on a loaded machine (CI once saw it "idle in transaction
    # (aborted)" right after the join). Gone within 5 s, or the cancel left it behind.
    deadline = time.monotonic() + 5
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        while (left := admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                                     (pids[0],)).fetchall()) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert left == []
