"""export_lib.settings: the one module of export_lib and the plugins that reads the environment;
each variable's parsing, default and error (ADR 0015)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from export_lib import settings
from export_lib.errors import ConfigError
from tests.conftest import REPO


def test_no_other_product_module_reads_the_environment():
    """``grep -rn os.environ export_lib plugins`` shows settings.py only."""
    reads = re.compile(r"\bos\.environ\b|\bgetenv\b|\bfrom os import\b.*\benviron\b|\bputenv\b")
    found = [f"{path.relative_to(REPO)}:{number}"
             for root in ("export_lib", "plugins") for path in sorted((REPO / root).rglob("*.py"))
             if path != REPO / "export_lib" / "settings.py"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if reads.search(line)]
    assert found == []


def test_it_reads_the_process_environment_at_each_call(monkeypatch):
    monkeypatch.setenv("EXPORT_CONFIG_DIR", "/srv/one")
    assert settings.config_dir() == "/srv/one"
    monkeypatch.setenv("EXPORT_CONFIG_DIR", "/srv/two")
    assert settings.config_dir() == "/srv/two"
    assert settings.config_dir({"EXPORT_CONFIG_DIR": "/given"}) == "/given"  # a mapping wins


@pytest.mark.parametrize("accessor", [settings.config_dir, settings.ledger_url,
                                      settings.artifact_root, settings.statement_timeout,
                                      settings.airflow_home, settings.dag_index_base])
def test_unset_empty_and_blank_variables_are_all_unset(accessor):
    assert accessor({}) is None
    names = ("EXPORT_CONFIG_DIR", "EXPORT_LEDGER_URL", "EXPORT_ARTIFACT_ROOT",
             "EXPORT_SOURCE_STATEMENT_TIMEOUT", "AIRFLOW_HOME", "EXPORT_DAG_INDEX_DIR")
    assert accessor(dict.fromkeys(names, "")) is None
    assert accessor(dict.fromkeys(names, "  ")) is None


def test_locations():
    env = {"EXPORT_HOME": "/srv/exports/../exports", "AIRFLOW_HOME": "/srv/airflow",
           "EXPORT_LEDGER_URL": " postgresql://u@db/ledger ", "EXPORT_ARTIFACT_ROOT": "s3://b/p",
           "EXPORT_ARTIFACT_CONN": "store_s3", "AIRFLOW_CONN_DEMO_SOURCE": "postgresql://h/db",
           "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
           "AIRFLOW__CELERY__BROKER_URL": "redis://r:6379/0"}
    assert settings.export_home(env) == Path("/srv/exports")
    assert settings.export_home({}) == Path.cwd().resolve()
    assert settings.airflow_home(env) == Path("/srv/airflow")
    assert settings.ledger_url(env) == "postgresql://u@db/ledger"
    assert settings.artifact_root(env) == "s3://b/p"
    assert settings.artifact_conn("aws_default", env) == "store_s3"
    assert settings.artifact_conn("aws_default", {}) == "aws_default"
    assert settings.connection_var("demo_source") == "AIRFLOW_CONN_DEMO_SOURCE"
    assert settings.connection_uri("demo_source", env) == "postgresql://h/db"
    assert settings.connection_uri("other", env) is None
    assert settings.executor(env) == "CeleryExecutor" and settings.executor({}) == ""
    assert settings.celery_broker_url(env) == "redis://r:6379/0"
    assert settings.celery_broker_url({}) == ""


def test_dag_index_base_prefers_its_own_variable_over_airflow_home():
    assert settings.dag_index_base({"AIRFLOW_HOME": "/a"}) == Path("/a/export_dag_index")
    assert settings.dag_index_base({"AIRFLOW_HOME": "/a", "EXPORT_DAG_INDEX_DIR": "/i"}) == (
        Path("/i"))


def test_log_format_and_statement_timeout_are_handed_on_as_written():
    assert settings.log_format({}) == "text"
    assert settings.log_format({"EXPORT_LOG_FORMAT": " JSON "}) == "json"
    assert settings.statement_timeout({"EXPORT_SOURCE_STATEMENT_TIMEOUT": "2h"}) == "2h"


def test_render_lease_and_budget():
    assert settings.render_lease({}) == timedelta(minutes=5)
    assert settings.render_lease({"EXPORT_RENDER_LEASE_SECONDS": "30"}) == timedelta(seconds=30)
    with pytest.raises(ConfigError, match=r"^EXPORT_RENDER_LEASE_SECONDS: '2' is not a whole "
                                          r"number of seconds >= 3; unset it for the default "
                                          r"\(300\)$"):
        settings.render_lease({"EXPORT_RENDER_LEASE_SECONDS": "2"})
    assert settings.render_budget({}) == (4, 2)
    assert settings.render_budget({"EXPORT_RENDER_BUDGET": "6",
                                   "EXPORT_RENDER_BUDGET_PER_COMPANY": "3"}) == (6, 3)
    with pytest.raises(ConfigError, match=r"^EXPORT_RENDER_BUDGET: '0' is not a positive whole "
                                          r"number of renders; unset it for the default \(4\)$"):
        settings.render_budget({"EXPORT_RENDER_BUDGET": "0"})


def test_ledger_connect_timeout():
    assert settings.ledger_connect_timeout({}) == 5
    assert settings.ledger_connect_timeout({"EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS": " 12 "}) == 12
    for bad in ("1", "0", "2.5", "soon"):
        with pytest.raises(ConfigError, match=rf"^EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS: "
                                              rf"'{re.escape(bad)}' is not a whole number of "
                                              r"seconds >= 2; unset it for the default \(5\)$"):
            settings.ledger_connect_timeout({"EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS": bad})


def test_operational_defaults_without_any_variable_are_the_seed_values():
    assert (settings.task_retries({}), settings.retry_delay({}), settings.max_retry_delay({})) == (
        11, timedelta(minutes=10), timedelta(days=1))
    assert (settings.delivery_retry_base({}), settings.delivery_retry_cap({})) == (
        timedelta(minutes=10), timedelta(hours=6))
    assert {kind: settings.task_timeout(kind, {}) for kind in settings.TASK_TIMEOUTS} == {
        "resolve": timedelta(minutes=10), "sensor": timedelta(minutes=10),
        "render": timedelta(hours=1), "publish": timedelta(minutes=30),
        "deliver": timedelta(hours=1), "small": timedelta(minutes=5)}
    assert settings.watermark_poke_interval({}) == timedelta(minutes=5)
    assert settings.catchup_lookback({}) == timedelta(hours=48)


def test_operational_variables_are_read_in_their_units():
    env = {"EXPORT_RETRIES": "3", "EXPORT_RETRY_DELAY_SECONDS": "2.5",
           "EXPORT_MAX_RETRY_DELAY_SECONDS": "4", "EXPORT_DELIVERY_RETRY_CAP_SECONDS": "50",
           "EXPORT_TIMEOUT_RENDER": "1h30m", "EXPORT_TIMEOUT_DELIVER": "PT45M",
           "EXPORT_WATERMARK_POKE_SECONDS": "10", "EXPORT_CATCHUP_LOOKBACK_HOURS": "0.5"}
    assert settings.task_retries(env) == 3
    assert settings.retry_delay(env) == timedelta(seconds=2.5)
    assert settings.max_retry_delay(env) == timedelta(seconds=4)
    # the delivery base follows the retry delay unless it has its own variable
    assert settings.delivery_retry_base(env) == timedelta(seconds=2.5)
    assert settings.delivery_retry_base({**env, "EXPORT_DELIVERY_RETRY_BASE_SECONDS": "3"}) == (
        timedelta(seconds=3))
    assert settings.delivery_retry_cap(env) == timedelta(seconds=50)
    assert settings.task_timeout("render", env) == timedelta(minutes=90)
    assert settings.task_timeout("deliver", env) == timedelta(minutes=45)
    assert settings.task_timeout("publish", env) == timedelta(minutes=30)
    assert settings.watermark_poke_interval(env) == timedelta(seconds=10)
    assert settings.catchup_lookback(env) == timedelta(minutes=30)
    assert settings.catchup_lookback({"EXPORT_CATCHUP_LOOKBACK_HOURS": "0"}) == timedelta(0)
    assert settings.task_retries({"EXPORT_RETRIES": "0"}) == 0


@pytest.mark.parametrize(("name", "value", "call", "message"), [
    ("EXPORT_RETRIES", "three", settings.task_retries,
     "EXPORT_RETRIES: 'three' is not a whole number of retries; unset it for the default (11)"),
    ("EXPORT_RETRIES", "-1", settings.task_retries,
     "EXPORT_RETRIES: '-1' is not a whole number of retries; unset it for the default (11)"),
    ("EXPORT_RETRY_DELAY_SECONDS", "0", settings.retry_delay,
     "EXPORT_RETRY_DELAY_SECONDS: '0' is not a number of seconds above 0; write e.g. "
     "EXPORT_RETRY_DELAY_SECONDS=30, or unset it for the default"),
    ("EXPORT_MAX_RETRY_DELAY_SECONDS", "1d", settings.max_retry_delay,
     "EXPORT_MAX_RETRY_DELAY_SECONDS: '1d' is not a number of seconds above 0; write e.g. "
     "EXPORT_MAX_RETRY_DELAY_SECONDS=30, or unset it for the default"),
    ("EXPORT_DELIVERY_RETRY_BASE_SECONDS", "nan", settings.delivery_retry_base,
     "EXPORT_DELIVERY_RETRY_BASE_SECONDS: 'nan' is not a number of seconds above 0; write e.g. "
     "EXPORT_DELIVERY_RETRY_BASE_SECONDS=30, or unset it for the default"),
    ("EXPORT_DELIVERY_RETRY_CAP_SECONDS", "inf", settings.delivery_retry_cap,
     "EXPORT_DELIVERY_RETRY_CAP_SECONDS: 'inf' is not a number of seconds above 0; write e.g. "
     "EXPORT_DELIVERY_RETRY_CAP_SECONDS=30, or unset it for the default"),
    ("EXPORT_WATERMARK_POKE_SECONDS", "-5", settings.watermark_poke_interval,
     "EXPORT_WATERMARK_POKE_SECONDS: '-5' is not a number of seconds above 0; write e.g. "
     "EXPORT_WATERMARK_POKE_SECONDS=30, or unset it for the default"),
    ("EXPORT_CATCHUP_LOOKBACK_HOURS", "-1", settings.catchup_lookback,
     "EXPORT_CATCHUP_LOOKBACK_HOURS: '-1' is not a number of hours 0 or more; write e.g. "
     "EXPORT_CATCHUP_LOOKBACK_HOURS=30, or unset it for the default"),
])
def test_malformed_operational_variables_name_variable_value_and_fix(name, value, call, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        call({name: value})


def test_malformed_timeouts_keep_their_messages():
    with pytest.raises(ConfigError, match=r"^EXPORT_TIMEOUT_DELIVER: 'soon' is not a duration; "
                                          r"use e.g. '2h', '90m', '1h30m' or '45s', or unset it "
                                          r"for the default \(3600 s\)$"):
        settings.task_timeout("deliver", {"EXPORT_TIMEOUT_DELIVER": "soon"})
    with pytest.raises(ConfigError, match=r"^EXPORT_TIMEOUT_RENDER: '0s' is zero; every export "
                                          r"task needs a time limit$"):
        settings.task_timeout("render", {"EXPORT_TIMEOUT_RENDER": "0s"})


def test_an_unknown_log_format_is_text_with_a_warning(caplog):
    assert settings.log_format({"EXPORT_LOG_FORMAT": "yaml"}) == "text"
    assert caplog.messages == ["EXPORT_LOG_FORMAT='yaml' is not a log format; use json or text "
                               "(the default); keeping text"]


def test_short_durations_are_one_grammar_for_variables_and_config():
    assert [settings.short_duration_seconds(t) for t in ("1h30m", " 2d ", "45s", "0s")] == [
        5400, 172800, 45, 0]
    assert [settings.short_duration_seconds(t) for t in ("", "90", "1m1h", "PT1H", "9" * 41)] == [
        None, None, None, None, None]
    with pytest.raises(ConfigError, match=r"^EXPORT_TIMEOUT_RENDER: '1000000000d' is not a "
                                          r"duration"):  # more days than a timedelta holds
        settings.task_timeout("render", {"EXPORT_TIMEOUT_RENDER": "1000000000d"})


@pytest.mark.parametrize(("reader", "name"), [
    (settings.config_read_only, "EXPORT_CONFIG_READ_ONLY"),
    (settings.ui_allow_unscoped_auth, "EXPORT_UI_ALLOW_UNSCOPED_AUTH"),
])
def test_a_flag_reads_true_or_false_and_refuses_anything_else(reader, name):
    assert reader({}) is False
    assert [reader({name: v}) for v in ("true", "YES", "1", "false", "no", "0")] == [
        True, True, True, False, False, False]
    with pytest.raises(ConfigError, match=rf"^{name}: 'maybe' is not true or false; unset it "
                                          r"for the default \(false: "):
        reader({name: "maybe"})


def test_an_export_setting_can_be_set_the_airflow_way_and_export_variables_win():
    """``AIRFLOW__EXPORTS__<NAME>`` (the provider's ``[exports]`` section, as Airflow spells it
    in the environment) when ``EXPORT_<NAME>`` is unset or blank; the EXPORT_ form wins."""
    assert settings.task_retries({"AIRFLOW__EXPORTS__RETRIES": "3"}) == 3
    assert settings.task_retries({"AIRFLOW__EXPORTS__RETRIES": "3", "EXPORT_RETRIES": "5"}) == 5
    assert settings.task_retries({"AIRFLOW__EXPORTS__RETRIES": "3", "EXPORT_RETRIES": " "}) == 3
    assert settings.task_timeout("render", {"AIRFLOW__EXPORTS__TIMEOUT_RENDER": "90m"}) == (
        timedelta(minutes=90))
    assert settings.ledger_url({"AIRFLOW__EXPORTS__LEDGER_URL": "sqlite:///x.db"}) == (
        "sqlite:///x.db")
    # variables without an EXPORT_ name have no Airflow form
    assert settings.exports_option("AIRFLOW_HOME") is None
    assert settings.airflow_home({"AIRFLOW__EXPORTS__HOME": "/nowhere"}) is None


def test_the_airflow_config_lookup_comes_last_and_only_for_the_process_environment(monkeypatch):
    asked = []

    def lookup(option: str) -> str | None:
        asked.append(option)
        return {"retries": "7"}.get(option)

    monkeypatch.delenv("EXPORT_RETRIES", raising=False)
    monkeypatch.delenv("AIRFLOW__EXPORTS__RETRIES", raising=False)
    settings.use_airflow_config(lookup)
    try:
        assert settings.task_retries() == 7
        monkeypatch.setenv("AIRFLOW__EXPORTS__RETRIES", "2")
        assert settings.task_retries() == 2
        assert settings.task_retries({}) == settings.TASK_RETRIES  # a given mapping is all
        assert asked == ["retries"]
    finally:
        settings.use_airflow_config(None)
    assert settings.task_retries({}) == settings.TASK_RETRIES


def test_a_malformed_value_set_the_airflow_way_is_named_where_it_was_set(monkeypatch):
    with pytest.raises(ConfigError, match=r"^AIRFLOW__EXPORTS__RETRIES: 'many' is not a whole "):
        settings.task_retries({"AIRFLOW__EXPORTS__RETRIES": "many"})
    with pytest.raises(ConfigError, match=r"^EXPORT_TIMEOUT_RENDER: 'soon' is not a duration"):
        settings.task_timeout("render", {"EXPORT_TIMEOUT_RENDER": "soon",
                                         "AIRFLOW__EXPORTS__TIMEOUT_RENDER": "2h"})
    monkeypatch.delenv("EXPORT_UI_ALLOW_UNSCOPED_AUTH", raising=False)
    monkeypatch.delenv("AIRFLOW__EXPORTS__UI_ALLOW_UNSCOPED_AUTH", raising=False)
    settings.use_airflow_config(lambda option: "perhaps")
    try:
        with pytest.raises(ConfigError, match=r"^airflow\.cfg \[exports\] ui_allow_unscoped_auth: "
                                              r"'perhaps' is not true or false"):
            settings.ui_allow_unscoped_auth()
    finally:
        settings.use_airflow_config(None)
