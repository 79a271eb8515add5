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


def test_publish_retried_after_a_storage_error_publishes_once(export_world):
    """Airflow's retry of ``publish`` finds the run still validating (the failed try changed
    nothing) and publishes the staged object as v1; no second version, no staging left."""
    import pytest

    from export_lib.errors import StorageError
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import publish_run, register_run, render_run
    from export_lib.storage.stores import open_store

    ledger, store = open_ledger(), open_store()
    key = register_run(ledger, export_world.schedule(), SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    blocker = export_world.artifacts / "acme" / "daily-spend"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")  # the artifact directory cannot be created

    with pytest.raises(StorageError, match=r"cannot publish .* the staged object is kept") as exc:
        publish_run(ledger, store, key, rendered["attempt_id"], now=NOW,
                    columns=rendered["columns"])
    assert exc.value.retryable
    assert ledger.get_run(key).state == "validating"
    assert len(export_world.staging_files()) == 1

    blocker.unlink()
    retried = publish_run(ledger, store, key, rendered["attempt_id"],
                          now=NOW + timedelta(minutes=10), columns=rendered["columns"])

    assert (retried["created"], retried["version"]) == (True, 1)
    assert ledger.get_run(key).state == "ready"
    assert [a.version for a in ledger.artifacts(key)] == [1]
    assert export_world.staging_files() == []


def test_render_cleared_after_publish_stages_nothing_and_publish_reports_v1(export_world):
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import publish_run, register_run, render_run
    from export_lib.storage.stores import open_store

    ledger, store = open_ledger(), open_store()
    key = register_run(ledger, export_world.schedule(), SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    first = publish_run(ledger, store, key, rendered["attempt_id"], now=NOW)
    before = export_world.counts()

    again = render_run(ledger, store, key, now=NOW + timedelta(hours=1))
    published = publish_run(ledger, store, key, None, now=NOW + timedelta(hours=1))

    assert (again["rendered"], again["artifact_version"]) == (False, 1)
    assert (published["created"], published["uri"]) == (False, first["uri"])
    assert export_world.counts() == before
    assert export_world.staging_files() == []


def test_a_removed_company_is_named_with_its_config_file(tmp_path):
    from export_lib.config.dag_loaders import removed_company

    dags = tmp_path / "dags"
    (dags / "config").mkdir(parents=True)
    (dags / "config" / "acme.yaml").write_text("company: {}\n")

    assert removed_company(dags, "acme") is None
    assert removed_company(dags, "gone") == (
        "company 'gone' was removed from the config (dags/config/gone.yaml is gone): this run is "
        "not rendered, published or delivered; restore dags/config/gone.yaml to export it")


def test_publish_cleared_after_a_failed_validation_says_to_render_again(export_world):
    import pytest

    from export_lib.errors import ArtifactValidationError, PublishError
    from export_lib.ledger import open_ledger
    from export_lib.pipeline import publish_run, register_run, render_run
    from export_lib.storage.stores import open_store

    ledger, store = open_ledger(), open_store()
    key = register_run(ledger, export_world.schedule(), SLOT, now=NOW).run_key
    rendered = render_run(ledger, store, key, now=NOW)
    (staged,) = (export_world.artifacts / ".staging").iterdir()
    staged.write_bytes(staged.read_bytes()[:-5])  # truncated after rendering
    with pytest.raises(ArtifactValidationError):
        publish_run(ledger, store, key, rendered["attempt_id"], now=NOW)

    with pytest.raises(PublishError, match=r"attempt [0-9a-f]{12} failed \(staged object .* does "
                                           r"not match what was rendered.*\); its staged object is "
                                           r"not published. Clear render with downstream"):
        publish_run(ledger, store, key, rendered["attempt_id"], now=NOW + timedelta(minutes=1))
    assert ledger.artifacts(key) == []
