"""Our log lines carry the run they are about (issue 22, item 5; export_lib/logfmt.py): bound
once per run, on every record as attributes, as words in text mode, as keys of a structlog
record or one JSON object per line in JSON mode — never a JSON string inside a message."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest
import structlog

from export_lib import logfmt
from export_lib.logfmt import JsonFormatter, bind, get_logger, run_context, scope

RUN = {"company": "acme", "schedule": "acme/daily-spend",
       "run": "acme/daily-spend/2026-03-29T05:00Z", "period": "2026-03-28"}
WORDS = ("company=acme schedule=acme/daily-spend run=acme/daily-spend/2026-03-29T05:00Z "
         "period=2026-03-28")
log = get_logger("export_lib.tests.logfmt")


@pytest.fixture(autouse=True)
def _text_mode() -> Iterator[None]:
    logfmt.uninstall()
    yield
    logfmt.uninstall()


def _fields(record: logging.LogRecord) -> dict[str, str | None]:
    return {name: getattr(record, name) for name in logfmt.FIELDS}


def test_text_lines_inside_a_run_start_with_its_four_fields(caplog):
    with caplog.at_level(logging.INFO, logger="export_lib"), run_context(**RUN):
        log.info("rendered %d rows (%s%% of the budget)", 12, 50)
        log.warning("artifact already holds this content")
    assert caplog.messages == [f"{WORDS}: rendered 12 rows (50% of the budget)",
                               f"{WORDS}: artifact already holds this content"]
    assert [_fields(r) for r in caplog.records] == [RUN, RUN]
    # The caller's line, not logfmt's.
    assert {(r.filename, r.funcName) for r in caplog.records} == {
        ("test_logfmt.py", "test_text_lines_inside_a_run_start_with_its_four_fields")}


def test_a_line_that_names_its_company_keeps_its_words_and_gets_the_fields(caplog):
    with caplog.at_level(logging.INFO, logger="export_lib"), run_context(**RUN):
        log.info("company=%s schedule=%s period=%s: skipped: %s", "acme", "acme/daily-spend",
                 "2026-03-28", "paused")
    assert caplog.messages == ["company=acme schedule=acme/daily-spend period=2026-03-28: "
                               "skipped: paused"]
    assert _fields(caplog.records[0]) == RUN


def test_a_percent_in_a_field_stays_a_percent_with_and_without_args(caplog):
    with caplog.at_level(logging.INFO, logger="export_lib"), run_context(company="100%co"):
        log.info("one %s", "arg")
        log.info("no args")
    assert caplog.messages == ["company=100%co: one arg", "company=100%co: no args"]


def test_outside_a_run_a_line_carries_what_its_call_names_or_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="export_lib"):
        log.warning("config file %s has %d error(s)", "acme.yaml", 2, extra={"company": "acme"})
        log.info("retention: %d artifact(s) deleted", 3)
    assert caplog.messages == ["company=acme: config file acme.yaml has 2 error(s)",
                               "retention: 3 artifact(s) deleted"]
    assert [_fields(r) for r in caplog.records] == [
        {"company": "acme", "schedule": None, "run": None, "period": None},
        {"company": None, "schedule": None, "run": None, "period": None}]


def test_an_inner_context_of_another_run_drops_the_outer_runs_narrower_fields(caplog):
    older = {"run": "acme/daily-spend/2026-03-28T05:00Z", "period": "2026-03-27"}
    with caplog.at_level(logging.INFO, logger="export_lib"), run_context(**RUN):
        with run_context(company="acme", schedule="acme/daily-spend"):
            log.info("same run")  # nothing changed: the run's fields stay
        log.info("missed", extra=older)  # another run of the same schedule
        with run_context(company="globex"):
            log.info("another company")
        log.info("back")
    assert [_fields(r) for r in caplog.records] == [
        RUN, {**RUN, **older},
        {"company": "globex", "schedule": None, "run": None, "period": None}, RUN]


def test_bind_holds_until_the_scoped_function_returns_and_only_there(caplog):
    @scope
    def stage() -> None:
        log.info("before the run is known")
        bind(**RUN)
        log.info("after")

    with caplog.at_level(logging.INFO, logger="export_lib"):
        stage()
        log.info("caller")
    assert [_fields(r)["run"] for r in caplog.records] == [None, RUN["run"], None]
    with pytest.raises(RuntimeError, match=r"bind\(\) outside a @scope function or run_context"):
        bind(company="acme")


def test_the_lease_thread_logs_with_the_run_that_started_it(caplog):
    from datetime import timedelta

    from export_lib.pipeline.lease import LeaseKeeper

    failed = threading.Event()

    class Ledger:
        def renew_lease(self, attempt_id, lease):
            failed.set()
            raise ConnectionError("ledger down")

    with caplog.at_level(logging.WARNING, logger="export_lib"), run_context(**RUN):
        with LeaseKeeper(Ledger(), "a" * 32, timedelta(seconds=0.03)):
            assert failed.wait(5)
    record = next(r for r in caplog.records if "renewing the render lease failed" in r.message)
    assert _fields(record) == RUN


def _airflow_like_handler(stream: io.StringIO) -> logging.Handler:
    """What Airflow does with stdlib records (airflow/sdk/_shared/logging/structlog.py,
    configure_logging): a ProcessorFormatter whose foreign_pre_chain merges structlog's context
    variables and renders JSON; no ExtraAdder, so record attributes are dropped."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, structlog.contextvars.merge_contextvars,
                           structlog.processors.add_log_level,
                           structlog.stdlib.PositionalArgumentsFormatter()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.JSONRenderer()],
        use_get_message=False, pass_foreign_args=True))
    return handler


def _records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_mode_puts_the_fields_as_keys_of_our_structlog_records_only():
    stream = io.StringIO()
    handler = _airflow_like_handler(stream)
    ours, theirs = logging.getLogger("export_lib.tests"), logging.getLogger("airflow.task")
    for logger in (ours, theirs):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    logfmt.install("json", bind=structlog.contextvars.bound_contextvars)
    try:
        with run_context(**RUN):
            log.info("rendered %d rows", 12)
            theirs.info("Task instance is in running state")
    finally:
        for logger in (ours, theirs):
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
    # Flat keys; the event is the message as written (no words added, no JSON inside).
    assert _records(stream) == [
        {"event": "rendered 12 rows", "logger": "export_lib.tests.logfmt", "level": "info",
         **RUN},
        {"event": "Task instance is in running state", "logger": "airflow.task",
         "level": "info"}]
    assert structlog.contextvars.get_contextvars() == {}  # bound around our record only


def test_json_formatter_writes_one_flat_object_per_line():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("export_lib").addHandler(handler)
    logging.getLogger("export_lib").setLevel(logging.INFO)
    logfmt.install("json")
    try:
        with run_context(**RUN):
            log.warning("delivery %s\nto sftp failed", "d1")
            try:
                raise OSError("boom")
            except OSError:
                log.exception("unexpected error")
        log.info("retention: %d deleted", 0)
    finally:
        logging.getLogger("export_lib").removeHandler(handler)
        logging.getLogger("export_lib").setLevel(logging.NOTSET)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3  # a newline in a message or a traceback stays inside its object
    first, second, third = (json.loads(line) for line in lines)
    assert set(first) == {"timestamp", "level", "event", "logger", *logfmt.FIELDS}
    assert {k: first[k] for k in ("level", "event", "logger")} == {
        "level": "warning", "event": "delivery d1\nto sftp failed",
        "logger": "export_lib.tests.logfmt"}
    assert {k: first[k] for k in logfmt.FIELDS} == RUN
    assert (second["event"], second["run"]) == ("unexpected error", RUN["run"])
    assert second["exception"].endswith("OSError: boom")
    assert third == {"timestamp": third["timestamp"], "level": "info",
                     "event": "retention: 0 deleted", "logger": "export_lib.tests.logfmt"}


def test_exportctl_in_json_mode_writes_json_lines_to_stderr(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from export_lib.cli.main import main

    defaults = Path(__file__).resolve().parents[2] / "dags" / "config" / "defaults.yaml"
    (tmp_path / "defaults.yaml").write_text(defaults.read_text())
    (tmp_path / "acme.yaml").write_text("company: {id: acme\n")  # broken YAML
    monkeypatch.setenv("EXPORT_LOG_FORMAT", "json")
    ours = logging.getLogger("export_lib")
    before = [h for h in ours.handlers if not isinstance(h, logging.NullHandler)]
    main(["validate", str(tmp_path)])
    main(["validate", str(tmp_path)])
    # Each command took its handler and mode away again (many commands run in one process).
    assert [h for h in ours.handlers if not isinstance(h, logging.NullHandler)] == before
    assert (ours.level, logfmt._Mode.json) == (logging.NOTSET, False)
    # The command's own report goes to stderr as text; our log records are the JSON lines.
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()
             if line.startswith("{")]
    assert [(r["logger"], r["level"], r["company"], r["event"]) for r in lines] == [
        ("export_lib.config.loader", "warning", "acme",
         f"config file {tmp_path / 'acme.yaml'} has 1 error(s); its schedules are not loaded")
    ] * 2


def _status(record: logging.LogRecord) -> str | None:
    return record.status


def test_status_is_the_runs_first_known_state_then_each_move_even_after_an_inner_scope(caplog):
    """A summary handed on from an earlier task says ``registered``; the stage reads the run
    (``reading``) — the first known state holds — and the ledger moves it: the move shows on the
    lines after the stage returned; a line about another run gets that run's own; outside the
    outermost scope nothing is remembered."""
    @scope
    def stage() -> None:
        bind(**RUN, status="reading")  # a fresher record, bound after the summary: ignored
        logfmt.note_status(RUN["run"], "rendering")
        log.info("rendering")

    @scope
    def task() -> None:
        bind(**RUN, status="registered")
        log.info("start")
        stage()
        log.info("rendered")
        log.info("another run", extra={"run": "acme/daily-spend/2026-03-28T05:00Z",
                                       "status": "failed"})
        log.info("status named by the call", extra={"status": "ready"})

    with caplog.at_level(logging.INFO, logger="export_lib"):
        task()
        logfmt.note_status(RUN["run"], "ready")  # no scope: nobody to tell
        with run_context(**RUN):
            log.info("later")
    assert [(r.getMessage().split(": ")[-1], _status(r)) for r in caplog.records] == [
        ("start", "registered"), ("rendering", "rendering"), ("rendered", "rendering"),
        ("another run", "failed"), ("status named by the call", "rendering"), ("later", None)]


def test_json_mode_gives_our_structlog_records_the_status_too():
    stream = io.StringIO()
    handler = _airflow_like_handler(stream)
    ours = logging.getLogger("export_lib.tests")
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)
    logfmt.install("json", bind=structlog.contextvars.bound_contextvars)
    try:
        with run_context(**RUN, status="validating"):
            logfmt.note_status(RUN["run"], "ready")
            log.info("published v%d", 1)
    finally:
        ours.removeHandler(handler)
        ours.setLevel(logging.NOTSET)
    assert _records(stream) == [{"event": "published v1", "logger": "export_lib.tests.logfmt",
                                 "level": "info", **RUN, "status": "ready"}]


def test_a_thread_started_inside_a_run_logs_its_latest_status():
    """The lease keeper's thread copies the context: it shares the task's status board."""
    seen: list[str | None] = []
    with run_context(**RUN, status="reading"):
        import contextvars

        ctx = contextvars.copy_context()
        logfmt.note_status(RUN["run"], "rendering")
        thread = threading.Thread(target=ctx.run, args=(lambda: seen.append(
            logfmt._status(logfmt.current(), None)),))
        thread.start()
        thread.join(5)
    assert seen == ["rendering"]
