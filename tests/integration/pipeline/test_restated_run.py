"""A restatement takes its run from the ledger (issue 23 item 4, ADR 0023): the trigger's
``conf`` names a run key and nothing else is believed; the key must be the restatement DAG's
company's, the grace is the run's captured one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from export_lib.errors import AuthorizationError, ConfigError
from export_lib.pipeline.restatement import restated_run

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)


def _restating_world(world):
    path = world.config / "acme.yaml"
    data = yaml.safe_load(path.read_text())
    data["widget_exports"][0]["late_data"] = {"policy": "restate", "grace": "6h"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return world


def test_the_run_and_its_grace_come_from_the_ledger(export_world):
    from export_lib.pipeline import register_run

    world = _restating_world(export_world)
    key = register_run(world.ledger(), world.schedule("acme/daily-spend"), SLOT, now=NOW).run_key
    run, grace = restated_run(world.ledger(), f" {key} ", "acme")
    assert (run.run_key, run.company, run.slot, grace) == (key, "acme", SLOT, timedelta(hours=6))
    assert run.window.start < run.window.end <= SLOT + timedelta(days=1)


def test_another_companys_run_is_refused(export_world):
    from export_lib.pipeline import register_run

    world = export_world
    key = register_run(world.ledger(), world.schedule("acme/daily-spend"), SLOT, now=NOW).run_key
    with pytest.raises(AuthorizationError, match=r"restatement of kiwi-outdoors: run "
                       r"'acme/daily-spend/2026-03-29T05:00Z' is not kiwi-outdoors's"):
        restated_run(world.ledger(), key, "kiwi-outdoors")


@pytest.mark.parametrize(("key", "message"), [
    ("", r"restatement of acme: no run_key in the run's conf"),
    ("acme/daily-spend/2020-01-01T05:00Z", r"no run 'acme/daily-spend/2020-01-01T05:00Z' in "
                                           r"the ledger \(exportctl runs --company acme"),
])
def test_no_key_or_an_unknown_key_is_one_clear_error(export_world, key, message):
    with pytest.raises(ConfigError, match=message):
        restated_run(export_world.ledger(), key, "acme")
