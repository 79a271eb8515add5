"""Our records through Airflow's own processor chain (issue 22 item 5): the formatter a task
process gives stdlib records, built from Airflow's ``structlog_processors`` the way
``configure_logging`` builds it (airflow/sdk/_shared/logging/structlog.py, 603-663). The real
task log, read back through the REST API: tests/system/scheduler/test_clear_and_retry.py."""

from __future__ import annotations

import io
import json
import logging

import structlog

from export_lib import logfmt
from export_lib.logfmt import get_logger, installed, run_context

RUN = {"company": "acme", "schedule": "acme/daily-spend",
       "run": "acme/daily-spend/2026-03-29T05:00Z", "period": "2026-03-28"}


def _task_log(mode: str) -> list[dict]:
    """What a task process sends its supervisor for one line of ours and one of Airflow's."""
    from airflow.sdk._shared.logging.structlog import drop_positional_args, structlog_processors

    shared, for_stdlib, _ = structlog_processors(json_output=True)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    drop_positional_args, for_stdlib],
        use_get_message=False, pass_foreign_args=True))
    loggers = [logging.getLogger("export_airflow.tasks.operators"), logging.getLogger("airflow.task")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        with installed(mode, bind=structlog.contextvars.bound_contextvars), run_context(**RUN):
            get_logger("export_airflow.tasks.operators").info("%d rows, %d bytes in %.1f s", 12, 345, 0.5)
            logging.getLogger("airflow.task").info("Pushing xcom")
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
            logger.propagate = True
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_mode_gives_airflows_record_our_fields_as_keys_and_keeps_the_message_text():
    ours, theirs = _task_log("json")
    assert {k: v for k, v in ours.items() if k != "timestamp"} == {
        "level": "info", "event": "12 rows, 345 bytes in 0.5 s",
        "logger": "export_airflow.tasks.operators", **RUN}
    assert {k: v for k, v in theirs.items() if k != "timestamp"} == {
        "level": "info", "event": "Pushing xcom", "logger": "airflow.task"}
    assert not logfmt._Mode.json  # installed() gave the mode back


def test_text_mode_puts_the_words_in_the_message_and_adds_no_keys():
    ours, _ = _task_log("text")
    assert {k: v for k, v in ours.items() if k != "timestamp"} == {
        "level": "info", "logger": "export_airflow.tasks.operators",
        "event": "company=acme schedule=acme/daily-spend run=acme/daily-spend/2026-03-29T05:00Z "
                 "period=2026-03-28: 12 rows, 345 bytes in 0.5 s"}
