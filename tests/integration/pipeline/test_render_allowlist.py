"""A run renders only what today's source allowlist allows (issue 23 item 1): its captured query
is checked against ``defaults.yaml``'s ``sources`` again when it renders, so a run registered
under an older version, or before the platform took a table off the list, reads nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from export_lib.config.loader import allowlist
from export_lib.errors import ConfigError
from export_lib.ledger import RunState

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)


def _register(world) -> str:
    from export_lib.pipeline import register_run

    return register_run(world.ledger(), world.schedule(), SLOT, now=NOW).run_key


def _edit_allowlist(world, edit) -> None:
    path = world.config / "defaults.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data["sources"]["demo_source"]["tables"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_run_renders_when_its_table_is_still_listed(export_world):
    from export_lib.pipeline import render_run

    key = _register(export_world)
    result = render_run(export_world.ledger(), export_world.store, key, now=NOW,
                        allowlist=allowlist(export_world.config))
    assert result["rows"] > 0


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda tables: tables.pop("widget_metrics"),
     r"captured query\.table: table 'widget_metrics' is not listed for source 'demo_source'"),
    (lambda tables: tables.update(widget_metrics={"tenant_column": "widget_id"}),
     r"captured query\.tenant_column: 'company_id' is not the tenant column of "
     r"'widget_metrics'; defaults.yaml 'sources' says 'widget_id'"),
], ids=["table-unlisted", "tenant-column-changed"])
def test_a_run_whose_query_the_allowlist_no_longer_allows_is_not_rendered(export_world, edit,
                                                                          problem):
    from export_lib.pipeline import render_run

    key = _register(export_world)
    _edit_allowlist(export_world, edit)
    ledger = export_world.ledger()
    with pytest.raises(ConfigError, match=rf"^run {key}: {problem}.*\. The run's config version "
                                          r"[0-9a-f]+ is not rendered: the source allowlist"):
        render_run(ledger, export_world.store, key, now=NOW,
                   allowlist=allowlist(export_world.config))
    # Nothing claimed, nothing read: no attempt, the run still only registered.
    assert ledger.attempts(key) == []
    assert ledger.get_run(key).state == RunState.REGISTERED


def test_a_run_whose_source_connection_was_taken_from_the_company_is_not_rendered(
        export_world):
    from export_lib.pipeline import render_run

    key = _register(export_world)
    export_world.grant_connection("demo_source", "source", ("kiwi-outdoors",))
    ledger = export_world.ledger()
    with pytest.raises(ConfigError, match=rf"^run {key}: captured query\.source: connection "
                                          r"'demo_source' belongs to 'kiwi-outdoors' \(defaults"
                                          r"\.yaml 'connections'\), not to 'acme'\. The run's "
                                          r"config version [0-9a-f]+ is not rendered"):
        render_run(ledger, export_world.store, key, now=NOW,
                   allowlist=allowlist(export_world.config))
    assert ledger.attempts(key) == []


def test_an_invalid_defaults_file_is_a_config_error_naming_it(export_world):
    (export_world.config / "defaults.yaml").write_text("sources: [not, a, mapping]\n")
    with pytest.raises(ConfigError, match=r"defaults\.yaml: sources"):
        allowlist(export_world.config)
