"""Stages repeated the way Airflow repeats them (a cleared task, a retry after the commit) find
the ledger's answer instead of failing or publishing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
NOW = datetime(2026, 3, 29, 5, 5, tzinfo=UTC)


def test_publish_repeated_after_success_reports_the_same_artifact(export_world, tmp_path):
    from export_lib.config.loader import load_catalog
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import publish_run, register_run, render_run
    from export_lib.storage.stores import open_store

    schedule = load_catalog(tmp_path / "dags" / "config").schedule("acme/daily-spend")
    ledger, store = open_ledger(), open_store()
    key = register_run(ledger, schedule, SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    first = publish_run(ledger, store, key, rendered["attempt_id"], now=NOW,
                        columns=rendered["columns"])

    again = publish_run(ledger, store, key, rendered["attempt_id"], now=NOW + timedelta(hours=1),
                        columns=rendered["columns"])

    assert first["created"] is True and again["created"] is False
    assert {k: again[k] for k in ("version", "uri", "sha256", "rows")} == {
        k: first[k] for k in ("version", "uri", "sha256", "rows")}
    assert ledger.get_run(key).state == "ready"
    assert [a.version for a in ledger.artifacts(key)] == [1]
