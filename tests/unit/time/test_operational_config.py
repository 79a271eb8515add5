"""Per-export operational settings (ADR 0015): ``retries``, ``timeouts``, ``catchup``,
``late_data.poke_interval`` and a destination's ``retry`` — optional, validated with messages
naming file, field, value and fix, merged over ``defaults.yaml`` key by key, recorded in a
run's snapshot and never part of ``config_version``."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from export_lib.config.loader import load_catalog
from export_lib.config.models import Schedule
from export_lib.config.operational import Catchup, DeliveryRetry, TaskRetries, TaskTimeouts
from tests.support.one_company import SHIPPED, company_yaml, config_dir_with_defaults


@pytest.fixture()
def config_dir(tmp_path: Path) -> Path:
    return config_dir_with_defaults(tmp_path)


def _write(config_dir: Path, extra: str = "", retry: str = "") -> Path:
    path = config_dir / "t.yaml"
    path.write_text(company_yaml(extra, path_suffix=retry))
    return path


def _schedule(config_dir: Path, extra: str = "", retry: str = "") -> Schedule:
    _write(config_dir, extra, retry)
    catalog = load_catalog(config_dir)
    assert catalog.errors == {}
    return catalog.schedule("t/daily")


def _errors(config_dir: Path, extra: str = "", retry: str = "") -> tuple[str, ...]:
    path = _write(config_dir, extra, retry)
    return load_catalog(config_dir).errors[str(path)]


def test_every_setting_is_optional_and_absent_means_the_deployment_default(config_dir):
    policies = _schedule(config_dir).policies
    assert (policies.retries, policies.timeouts, policies.catchup) == (None, None, None)
    assert policies.late_data.poke_interval is None
    assert _schedule(config_dir).destinations[0].retry is None


def test_good_values_are_read_as_durations(config_dir):
    schedule = _schedule(
        config_dir,
        "    retries: {count: 3, delay: 30s, max_delay: PT4M}\n"
        "    timeouts: {render: 10m, deliver: 1h30m, sensor: 45s}\n"
        "    catchup: {lookback: 48h}\n"
        "    late_data: {policy: wait_for_watermark, poke_interval: 5m}\n",
        ", retry: {base: 10m, cap: 6h}")
    policies = schedule.policies
    assert policies.retries == TaskRetries(count=3, delay=timedelta(seconds=30),
                                           max_delay=timedelta(minutes=4))
    assert policies.timeouts == TaskTimeouts(render=timedelta(minutes=10),
                                             deliver=timedelta(minutes=90),
                                             sensor=timedelta(seconds=45))
    assert policies.timeouts.get("publish") is None
    assert policies.catchup == Catchup(lookback=timedelta(hours=48))
    assert policies.late_data.poke_interval == timedelta(minutes=5)
    assert schedule.destinations[0].retry == DeliveryRetry(base=timedelta(minutes=10),
                                                           cap=timedelta(hours=6))


def test_zero_retries_and_a_zero_lookback_are_allowed(config_dir):
    policies = _schedule(config_dir, "    retries: {count: 0}\n    catchup: {lookback: 0s}\n"
                         ).policies
    assert policies.retries.count == 0 and policies.retries.delay is None
    assert policies.catchup.lookback == timedelta(0)


HELP = "expected a duration such as '2h', '90m', '1h30m' or 'PT2H'"


@pytest.mark.parametrize(("extra", "retry", "expected"), [
    pytest.param("    retries: {count: -1}\n", "",
                 "widget_exports[0].retries.count: retries.count -1 is out of range; give a whole "
                 "number from 0 (no retry) to 100", id="count-negative"),
    pytest.param("    retries: {count: 101}\n", "",
                 "widget_exports[0].retries.count: retries.count 101 is out of range; give a "
                 "whole number from 0 (no retry) to 100", id="count-huge"),
    pytest.param("    retries: {count: '3'}\n", "",
                 "widget_exports[0].retries.count: Input should be a valid integer (got '3')",
                 id="count-text"),
    pytest.param("    retries: {delay: 0s}\n", "",
                 "widget_exports[0].retries.delay: retries.delay must be longer than zero (got "
                 "0s); give e.g. '30s', or leave it out for the deployment default",
                 id="delay-zero"),
    pytest.param("    retries: {delay: soon}\n", "",
                 f"widget_exports[0].retries.delay: {HELP} (got 'soon')", id="delay-unparsable"),
    pytest.param("    retries: {delay: 30s, max_delay: 4s}\n", "",
                 "widget_exports[0].retries: retries.max_delay 4s is shorter than retries.delay "
                 "30s; make retries.max_delay at least 30s (the longest wait between two tries), "
                 "or lower retries.delay", id="max-delay-below-delay"),
    pytest.param("    retries: {count: 3, attempts: 5}\n", "",
                 "widget_exports[0].retries.attempts: unknown key 'attempts'; allowed keys: "
                 "count, delay, max_delay", id="retries-unknown-key"),
    pytest.param("    timeouts: {render: 0s}\n", "",
                 "widget_exports[0].timeouts.render: timeouts.render must be longer than zero "
                 "(got 0s); every export task needs a time limit: give e.g. '90m', or leave it "
                 "out for the deployment default", id="timeout-zero"),
    pytest.param("    timeouts: {rendr: 10m}\n", "",
                 "widget_exports[0].timeouts.rendr: unknown key 'rendr'; did you mean 'render'? "
                 "allowed keys: deliver, publish, render, resolve, sensor, small",
                 id="timeout-unknown-kind"),
    pytest.param("    timeouts: {deliver: 400d}\n", "",
                 "widget_exports[0].timeouts.deliver: duration '400d' is longer than the maximum "
                 "of 366 days; use a shorter one", id="timeout-too-long"),
    pytest.param("    catchup: {lookback: -1h}\n", "",
                 f"widget_exports[0].catchup.lookback: {HELP} (got '-1h')", id="lookback-negative"),
    pytest.param("    catchup: {lookback_hours: 48}\n", "",
                 "widget_exports[0].catchup.lookback_hours: unknown key 'lookback_hours'; did you "
                 "mean 'lookback'? allowed keys: batch_over, lookback", id="catchup-unknown-key"),
    pytest.param("    catchup: {batch_over: -1}\n", "",
                 "widget_exports[0].catchup.batch_over: catchup.batch_over cannot be negative "
                 "(got -1); give e.g. 8 (0: every recovery in batches), or leave it out for the "
                 "deployment default", id="batch-over-negative"),
    pytest.param("    late_data: {policy: wait_for_watermark, poke_interval: 0s}\n", "",
                 "widget_exports[0].late_data.poke_interval: late_data.poke_interval must be "
                 "longer than zero (got 0s); give e.g. '5m', or leave it out for the deployment "
                 "default", id="poke-zero"),
    pytest.param("    late_data: {policy: wait_for_watermark, poke_every: 5m}\n", "",
                 "widget_exports[0].late_data.poke_every: unknown key 'poke_every'; did you mean "
                 "'poke_interval'? allowed keys: grace, poke_interval, policy", id="late-data-unknown-key"),
    pytest.param("", ", retry: {base: 6h, cap: 10m}",
                 "widget_exports[0].destinations[0].retry: retry.cap 10m is shorter than "
                 "retry.base 6h; make retry.cap at least 6h (the longest wait between two tries), "
                 "or lower retry.base", id="delivery-cap-below-base"),
    pytest.param("", ", retry: {base: 0s}",
                 "widget_exports[0].destinations[0].retry.base: retry.base must be longer than "
                 "zero (got 0s); give e.g. '10m', or leave it out for the deployment default",
                 id="delivery-base-zero"),
    pytest.param("", ", retry: {base: 10m, cap: sometime}",
                 f"widget_exports[0].destinations[0].retry.cap: {HELP} (got 'sometime')",
                 id="delivery-cap-unparsable"),
    pytest.param("", ", retry: {base: 10m, max: 6h}",
                 "widget_exports[0].destinations[0].retry.max: unknown key 'max'; allowed keys: "
                 "base, cap", id="delivery-retry-unknown-key"),
])
def test_bad_values_are_named_with_file_field_value_and_fix(config_dir, extra, retry, expected):
    path = _write(config_dir, extra, retry)
    assert load_catalog(config_dir).errors[str(path)] == (f"{path}: {expected}",)


def test_models_refuse_what_yaml_cannot_spell():
    """A negative lookback is no YAML duration (above); built in Python it is still refused."""
    with pytest.raises(ValidationError, match=r"catchup.lookback cannot be negative \(got -1h\); "
                                              r"give e.g. '48h', or '0s' to look back only"):
        Catchup(lookback=timedelta(hours=-1))


def test_defaults_yaml_sets_them_for_every_export_and_exports_override_key_by_key(config_dir):
    defaults = config_dir / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace(
        "  skip_empty: false\n",
        "  skip_empty: false\n  retries: {count: 5, delay: 1m}\n  timeouts: {render: 2h}\n"
        "  catchup: {lookback: 24h}\n", 1))
    policies = _schedule(config_dir, "    retries: {delay: 30s}\n    timeouts: {publish: 5m}\n"
                         ).policies
    assert policies.retries == TaskRetries(count=5, delay=timedelta(seconds=30))
    assert policies.timeouts == TaskTimeouts(render=timedelta(hours=2),
                                             publish=timedelta(minutes=5))
    assert policies.catchup.lookback == timedelta(hours=24)
    shutil.copy(SHIPPED / "acme.yaml", config_dir / "acme.yaml")
    data = load_catalog(config_dir).schedule("acme/google-ads/primary")  # data exports too
    assert (data.policies.retries.count, data.policies.catchup.lookback) == (5, timedelta(hours=24))


def test_a_broken_defaults_yaml_setting_names_defaults_yaml(config_dir):
    defaults = config_dir / "defaults.yaml"
    defaults.write_text(defaults.read_text().replace(
        "  skip_empty: false\n", "  skip_empty: false\n  retries: {count: -2}\n", 1))
    _write(config_dir)
    errors = load_catalog(config_dir).errors[str(defaults)]
    assert errors == (f"{defaults}: policies.retries.count: retries.count -2 is out of range; "
                      "give a whole number from 0 (no retry) to 100",)


SETTINGS = ("    retries: {count: 3, delay: 30s, max_delay: 4m}\n    timeouts: {render: 10m}\n"
            "    catchup: {lookback: 0s}\n    late_data: {poke_interval: 5m}\n")


def test_they_are_not_part_of_the_config_version(config_dir):
    plain = _schedule(config_dir)
    tuned = _schedule(config_dir, SETTINGS, ", retry: {base: 1m, cap: 2h}")
    assert tuned.config_version == plain.config_version
    assert "retries" not in tuned.content()["policies"]
    assert tuned.content() == plain.content()


def test_a_run_snapshot_records_them_where_set_and_reads_back(config_dir):
    plain = _schedule(config_dir).snapshot()
    assert {"retries", "timeouts", "catchup"}.isdisjoint(plain["policies"])
    assert "poke_interval" not in plain["policies"]["late_data"]
    assert "retry" not in plain["destinations"][0]
    tuned = _schedule(config_dir, SETTINGS, ", retry: {base: 1m, cap: 2h}")
    snapshot = tuned.snapshot()
    assert snapshot["policies"]["retries"] == {"count": 3, "delay": "PT30S", "max_delay": "PT4M"}
    assert snapshot["policies"]["timeouts"]["render"] == "PT10M"
    assert snapshot["policies"]["catchup"] == {"lookback": "PT0S"}
    assert snapshot["policies"]["late_data"]["poke_interval"] == "PT5M"
    assert snapshot["destinations"][0]["retry"] == {"base": "PT1M", "cap": "PT2H"}
    assert Schedule.model_validate(snapshot) == tuned  # what stages.schedule_of reads back


def test_a_destinations_retry_pacing_is_not_part_of_its_delivery_identity(config_dir):
    plain = _schedule(config_dir).destinations[0]
    paced = _schedule(config_dir, retry=", retry: {base: 1m}").destinations[0]
    assert paced.identity() == plain.identity()


def test_a_history_entry_cannot_set_them(config_dir):
    path = _write(config_dir, "    effective_from: 2026-12-01T00:00:00+01:00\n"
                              "    history:\n"
                              "      - retries: {count: 1}\n"
                              "        catchup: {lookback: 1h}\n"
                              "        late_data: {poke_interval: 1m}\n")
    assert load_catalog(config_dir).errors[str(path)] == (
        f"{path}: widget_exports[0].history[0]: catchup, retries, late_data.poke_interval cannot "
        "differ between versions (they set the DAG's tasks, the same for every run); remove them "
        "from the entry and set them on the current version",)


def test_the_current_versions_settings_reach_every_version(config_dir):
    schedule = _schedule(config_dir, "    retries: {count: 2}\n"
                                     "    effective_from: 2026-12-01T00:00:00+01:00\n"
                                     "    history:\n      - deadline: 3h\n")
    assert [v.policies.retries.count for v in schedule.versions] == [2, 2]
