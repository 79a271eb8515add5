"""Connections belong to companies (issue 23 item 3): a company file uses a connection only for
what and by whom ``connections:`` in defaults.yaml grants it; a source listed under ``sources:``
is every company's unless ``connections`` narrows it. One error per use, naming file and field;
the other companies load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from tests.world import REPO


def _config(tmp_path: Path, grants: str, acme_extra: str = "") -> Path:
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    defaults = (config / "defaults.yaml").read_text()
    assert "\nconnections:\n" in defaults
    (config / "defaults.yaml").write_text(defaults.replace("\nconnections:\n",
                                                           "\nconnections:\n" + grants, 1))
    anchor = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
    acme = (config / "acme.yaml").read_text()
    assert anchor in acme
    (config / "acme.yaml").write_text(acme.replace(anchor, anchor + acme_extra, 1))
    return config


def test_a_source_narrowed_to_one_company_refuses_the_others(tmp_path: Path):
    config = _config(tmp_path, "  demo_source: {use: [source], companies: [acme]}\n")
    catalog = load_catalog(config)
    assert sorted(catalog.companies) == ["acme"]
    (line, *_) = catalog.errors[str(config / "kiwi-outdoors.yaml")]
    assert line == (f"{config / 'kiwi-outdoors.yaml'}: widget_exports[0].query.source: connection "
                    "'demo_source' belongs to 'acme' (defaults.yaml 'connections'), not to "
                    "'kiwi-outdoors'")
    assert load_catalog(config, only="kiwi-outdoors").errors == {
        k: v for k, v in catalog.errors.items() if "kiwi-outdoors" in k}


@pytest.mark.parametrize(("grants", "dest", "message"), [
    ("  kiwi_sftp: {use: [sftp], companies: [kiwi-outdoors]}\n",
     "{id: x, type: sftp, conn_id: kiwi_sftp, path: acme/in}",
     "connection 'kiwi_sftp' belongs to 'kiwi-outdoors' (defaults.yaml 'connections'), not to "
     "'acme'"),
    ("", "{id: x, type: webhook, conn_id: kiwi_hook, endpoint: /in}",
     "connection 'kiwi_hook' is not granted in defaults.yaml; a company file uses only the "
     "connections 'connections:' there grants it (e.g. kiwi_hook: {use: [webhook], companies: "
     "[acme]} if the connection is 'acme''s)"),
    ("", "{id: x, type: s3, conn_id: demo_source, bucket: drop, prefix: acme/in}",
     "connection 'demo_source' is not granted in defaults.yaml"),
    ("  acme_sftp: {use: [sftp], companies: [acme]}\n",
     "{id: x, type: webhook, conn_id: acme_sftp, endpoint: /in}",
     "connection 'acme_sftp' is granted for sftp in defaults.yaml, not for webhook"),
], ids=["other-company", "not-granted", "source-as-destination", "wrong-use"])
def test_a_destination_on_a_connection_not_granted_to_the_company_is_one_error(
        tmp_path: Path, grants: str, dest: str, message: str):
    config = _config(tmp_path, grants, f"      - {dest}\n")
    catalog = load_catalog(config)
    assert list(catalog.errors) == [str(config / "acme.yaml")]
    (line,) = catalog.errors[str(config / "acme.yaml")]
    assert line.startswith(
        f"{config / 'acme.yaml'}: widget_exports[0].destinations[1].conn_id: {message}"), line
    assert sorted(catalog.companies) == ["dentsu-happiness", "kiwi-outdoors"]


def test_a_granted_connection_loads(tmp_path: Path):
    config = _config(tmp_path, "  acme_sftp: {use: [sftp], companies: [acme]}\n",
                     "      - {id: x, type: sftp, conn_id: acme_sftp, path: acme/upload}\n")
    catalog = load_catalog(config)
    assert catalog.ok, catalog.error_lines


@pytest.mark.parametrize(("grants", "message"), [
    ("  x: {use: [ftp], companies: all}\n", "connections.x.use[0]: Input should be 'source', "
     "'s3', 'gcs', 'sftp', 'webhook' or 'email' (got 'ftp')"),
    ("  x: {use: [sftp], companies: everyone}\n", "connections.x.companies: give 'all' or a "
     "list of company ids such as [acme] (got 'everyone')"),
    ("  x: {use: [sftp], companies: [Not An Id]}\n", "connections.x.companies: give 'all' "),
    ("  x: {use: [], companies: all}\n", "connections.x.use: "),
    ("  'bad id!': {use: [sftp], companies: all}\n", "connections: 'bad id!' is not a valid "
     "connection id: use letters, digits, '_', '.' or '-', starting with a letter, digit or '_' "
     "(e.g. acme_sftp)"),
])
def test_a_bad_grant_is_an_error_of_defaults(tmp_path: Path, grants: str, message: str):
    config = _config(tmp_path, grants)
    catalog = load_catalog(config)
    (line,) = catalog.errors[str(config / "defaults.yaml")]
    assert line.startswith(f"{config / 'defaults.yaml'}: {message}"), line
    assert not catalog.companies
