"""Names cannot collide (issue 12): catalogs built to collide are rejected at validation, the
old colliding pairs now get different names, and a forced collision at promote is refused on
every store (local, S3 on moto, GCS on the storage-testbench) with nothing overwritten; the ledger
refuses to record one URI for two runs."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import PublishError
from export_lib.periods.names import artifact_key
from tests.world import REPO, exportctl
from tests.world import clean_env as _env

HERE = Path(__file__).resolve().parents[2] / "data" / "hostile"
SLOT = datetime(2026, 3, 29, 14, tzinfo=UTC)
KEY = "acme/daily-spend/acme__daily-spend__2026-03-28__slot-20260329T1400Z__v1.csv"


def catalog_dir(tmp_path: Path, case: str) -> Path:
    target = tmp_path / case
    target.mkdir()
    shutil.copy(REPO / "dags" / "config" / "defaults.yaml", target)
    for path in (HERE / "catalogs" / case).glob("*.yaml"):
        shutil.copy(path, target)
    extra = HERE / "catalogs" / case / "defaults.extra"
    if extra.exists():  # replaces the shipped (empty) destination_areas
        defaults = (target / "defaults.yaml").read_text()
        assert "\ndestination_areas: {}\n" in defaults
        (target / "defaults.yaml").write_text(
            defaults.replace("\ndestination_areas: {}\n", "\n" + extra.read_text(), 1))
    return target


def test_a_same_tenant_collision_is_rejected_at_validation(tmp_path: Path):
    config = catalog_dir(tmp_path, "same-tenant")
    result = exportctl("validate", str(config), "--no-source", cwd=tmp_path, env=_env())
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == (
        f"{config / 'collide.yaml'}: data_exports[0].channel: export 'google-ads/primary' reads "
        "like 'google-ads-primary' (the names differ only by separators, so their files would "
        "be told apart by '__' alone); rename one")


def test_a_cross_tenant_collision_is_rejected_at_validation(tmp_path: Path):
    config = catalog_dir(tmp_path, "cross-tenant")
    result = exportctl("validate", str(config), "--no-source", cwd=tmp_path, env=_env())
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{config / 'acme_x.yaml'}: data_exports[0].{kind}.destinations[0].prefix: prefix "
        "'data/reports' in bucket 'exports-shared' reaches into company 'acme''s area s3 "
        "exports-shared/data ('destination_areas' in defaults.yaml); write under this "
        "company's own prefix or area" for kind in ("primary", "secondary")]
    catalog = load_catalog(config)
    assert sorted(catalog.companies) == ["acme"]  # the one writing into the other's area
    assert load_catalog(config, only="acme_x").error_lines == result.stdout.splitlines()


def test_an_earlier_version_sharing_a_destination_is_rejected_too(tmp_path: Path):
    config = catalog_dir(tmp_path, "cross-tenant-history")
    result = exportctl("validate", str(config), "--no-source", cwd=tmp_path, env=_env())
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{config / 'acme_x.yaml'}: data_exports[0].primary.history[0].destinations[0].prefix: "
        "prefix 'data/reports' in bucket 'exports-shared' reaches into company 'acme''s area "
        "s3 exports-shared/data ('destination_areas' in defaults.yaml); write under this "
        "company's own prefix or area"]
    assert sorted(load_catalog(config).companies) == ["acme"]


def test_the_pairs_that_collided_get_different_names():
    period = "2026-03-28"
    widget = artifact_key("acme", "acme/google-ads-primary", period, SLOT, 1, "csv")
    channel = artifact_key("acme", "acme/google-ads/primary", period, SLOT, 1, "csv")
    assert widget.rsplit("/", 1)[1] == (
        "acme__google-ads-primary__2026-03-28__slot-20260329T1400Z__v1.csv")
    assert channel.rsplit("/", 1)[1] == (
        "acme__google-ads__primary__2026-03-28__slot-20260329T1400Z__v1.csv")
    tenant_a = artifact_key("acme", "acme/x_y/primary", period, SLOT, 1, "csv")
    tenant_b = artifact_key("acme_x", "acme_x/y/primary", period, SLOT, 1, "csv")
    assert tenant_a.rsplit("/", 1)[1] != tenant_b.rsplit("/", 1)[1]


def test_the_default_destination_is_each_companys_own(tmp_path: Path):
    catalog = load_catalog(REPO / "dags" / "config")
    paths = {s.company.id: s.destinations[0].path for s in catalog.schedules
             if s.kind == "primary"}
    assert paths == {"acme": "outbox/acme/data_exports",
                     "dentsu-happiness": "outbox/dentsu-happiness"}


# -- promote ---------------------------------------------------------------------------------
def _stage(store, body: bytes) -> tuple[str, dict]:
    uri = store.staging_uri(uuid.uuid4().hex, "csv")
    with store.open_staging(uri) as fh:
        fh.write(body)
    return uri, {"sha256": hashlib.sha256(body).hexdigest()}


@pytest.fixture(params=["local", "s3", "gcs"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from export_lib.storage.stores import LocalStore, open_store

    if request.param == "local":
        return LocalStore(tmp_path / "artifacts")
    name = f"exports-{uuid.uuid4().hex[:10]}"
    server = request.getfixturevalue("s3_server" if request.param == "s3" else "gcs_server")
    if request.param == "s3":
        server.client().create_bucket(Bucket=name)
    else:
        server.client().create_bucket(name)
    monkeypatch.setenv("AIRFLOW_CONN_ARTIFACTS", server.connection_uri())
    monkeypatch.setenv("EXPORT_ARTIFACT_CONN", "artifacts")
    return open_store(f"{'s3' if request.param == 's3' else 'gs'}://{name}/exports")


def _read(store, uri: str) -> bytes:
    with store.read(uri) as fh:
        return fh.read()


def test_a_forced_collision_at_promote_is_refused_and_nothing_is_overwritten(store):
    first, meta = _stage(store, b"a,b\n1,2\n")
    uri, manifest_uri = store.promote(first, KEY, {**meta, "run_key": "acme/daily-spend/A"})
    before = (_read(store, uri), _read(store, manifest_uri))

    other, meta = _stage(store, b"a,b\n9,9\n")
    with pytest.raises(PublishError, match=r"says the object belongs to run acme/daily-spend/A, "
                                           r"not acme/daily-spend/B; refusing to replace"):
        store.promote(other, KEY, {**meta, "run_key": "acme/daily-spend/B"})
    assert (_read(store, uri), _read(store, manifest_uri)) == before
    assert json.loads(before[1])["run_key"] == "acme/daily-spend/A"


def test_the_same_runs_unrecorded_leftover_is_replaced(store):
    first, meta = _stage(store, b"a,b\n1,2\n")
    uri, _ = store.promote(first, KEY, {**meta, "run_key": "acme/daily-spend/A"})
    again, meta = _stage(store, b"a,b\n1,3\n")  # a re-render of the same run, new content
    assert store.promote(again, KEY, {**meta, "run_key": "acme/daily-spend/A"})[0] == uri
    assert _read(store, uri) == b"a,b\n1,3\n"


def test_an_object_nobody_claimed_is_not_replaced(tmp_path: Path):
    from export_lib.storage.stores import LocalStore

    store = LocalStore(tmp_path / "artifacts")
    planted = store.root / KEY
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"planted\n")
    staged, meta = _stage(store, b"a,b\n1,2\n")
    with pytest.raises(PublishError, match="exists with other content and no run claims it"):
        store.promote(staged, KEY, {**meta, "run_key": "acme/daily-spend/A"})
    assert planted.read_bytes() == b"planted\n"
    assert not planted.with_name(planted.name + ".manifest.json").exists()


def test_the_ledger_records_one_uri_for_one_run_only(tmp_path: Path):
    from export_lib.ledger import open_ledger
    from tests.fixtures.ledger import NOW, registration

    ledger = open_ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.upgrade()
    keys = []
    for hour in (5, 6):
        run, _ = ledger.register(registration(f"acme/daily-spend/2026-03-29T0{hour}:00Z"), NOW)
        attempt = ledger.claim_attempt(run.run_key, origin="t", now=NOW,
                                       staging_uri=lambda a: f"file:///s/{a}")
        ledger.advance(run.run_key, attempt.attempt_id, "rendering", NOW)
        ledger.record_staged(run.run_key, attempt.attempt_id, rows=1, nbytes=1,
                             sha256=f"{hour:064d}", now=NOW)
        ledger.advance(run.run_key, attempt.attempt_id, "validating", NOW)
        keys.append((run.run_key, attempt.attempt_id))

    def same(version: int) -> tuple[str, str]:
        return "file:///a/one.csv", "file:///a/one.csv.manifest.json"

    ledger.publish(keys[0][0], keys[0][1], now=NOW, fmt="csv", promote=same)
    with pytest.raises(PublishError, match=r"file:///a/one.csv is already recorded as an "
                                           r"artifact of another run"):
        ledger.publish(keys[1][0], keys[1][1], now=NOW, fmt="csv", promote=same)
    assert ledger.count("artifacts") == 1


def test_object_store_claims_are_conditional_writes(store):
    """The claim is ``If-None-Match: *`` on S3 (moto honours it) and ``ifGenerationMatch=0``
    on GCS (the storage-testbench honours it): the second create of one manifest fails even
    without the read-before-write check."""
    if type(store).__name__ not in ("S3Store", "GcsStore"):
        pytest.skip("the local store claims with os.link, tested above")
    assert store._put_if_absent("exports/claim.json", b"{}") is True
    assert store._put_if_absent("exports/claim.json", b"{}") is False
