"""Object-store and SFTP destinations stay in their company's area (issue 23 item 2): under
``<bucket or server>/<company>/…`` or in a location ``defaults.yaml`` lists for the company under
``destination_areas``, never inside another company's area; bad area entries are one error each
on ``defaults.yaml``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from tests.world import REPO

COMPANY = """company: {{id: {id}, name: {id}, timezone: UTC, owner: o@{id}.example}}
data_exports:
  - channel: ads
    primary:
      destinations:
        - {dest}
"""


def _config(tmp_path: Path, areas: str, **companies: str) -> Path:
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    defaults = (config / "defaults.yaml").read_text()
    assert "\ndestination_areas: {}\n" in defaults
    defaults = defaults.replace("\ndestination_areas: {}\n", "\ndestination_areas:\n" + areas, 1)
    (config / "defaults.yaml").write_text(defaults.replace("\nconnections:\n", (
        "\nconnections:\n"
        "  newco_partner: {use: [sftp], companies: [newco]}\n"
        "  acme_partner: {use: [sftp], companies: [acme, newco]}\n"
        "  shared_sftp: {use: [sftp], companies: all}\n"), 1))
    for company, dest in companies.items():
        (config / f"{company}.yaml").write_text(COMPANY.format(id=company, dest=dest))
    return config


@pytest.mark.parametrize("dest", [
    "{id: s, type: s3, bucket: partner-drop, prefix: incoming/daily}",  # in its listed area
    "{id: s, type: s3, bucket: shared, prefix: newco/ads}",  # its own prefix of any bucket
    "{id: g, type: gcs, bucket: gcs-drop, prefix: anything}",
    "{id: p, type: sftp, conn_id: newco_partner, path: /upload}",  # the whole server is its own
    "{id: p, type: sftp, conn_id: shared_sftp, path: newco/in}",
], ids=["s3-area", "s3-own-prefix", "gcs-area", "sftp-area", "sftp-own-path"])
def test_a_destination_in_the_companys_area_loads(tmp_path: Path, dest: str):
    config = _config(tmp_path, '  newco: ["s3://partner-drop/incoming", "gs://gcs-drop", '
                     '"sftp://newco_partner"]\n', newco=dest)
    catalog = load_catalog(config)
    assert catalog.ok, catalog.error_lines
    assert load_catalog(config, only="newco").ok


@pytest.mark.parametrize(("dest", "message"), [
    ("{id: s, type: s3, bucket: acme-drop, prefix: newco/ads}",
     "prefix: prefix 'newco/ads' in bucket 'acme-drop' reaches into company 'acme''s area s3 "
     "acme-drop ('destination_areas' in defaults.yaml)"),
    ("{id: p, type: sftp, conn_id: acme_partner, path: /newco}",
     "path: path '/newco' on connection 'acme_partner' reaches into company 'acme''s area sftp "
     "acme_partner ("),
    ("{id: s, type: s3, bucket: partner-drop, prefix: other/place}",
     "prefix: prefix 'other/place' in bucket 'partner-drop' is outside the company's area; start "
     "it with 'newco/', or list \"s3://partner-drop/other/place\" for 'newco' under "
     "'destination_areas' in defaults.yaml"),
])
def test_a_destination_outside_its_area_is_one_error_and_the_owner_loads(
        tmp_path: Path, dest: str, message: str):
    config = _config(tmp_path, '  acme: ["s3://acme-drop", "sftp://acme_partner"]\n'
                     '  newco: ["s3://partner-drop/incoming"]\n', newco=dest)
    catalog = load_catalog(config)
    (line,) = catalog.errors[str(config / "newco.yaml")]
    assert line.startswith(f"{config / 'newco.yaml'}: data_exports[0].primary.destinations[0]."
                           f"{message}"), line
    assert len(catalog.errors) == 1 and "acme" in catalog.companies
    assert load_catalog(config, only="newco").errors == catalog.errors


@pytest.mark.parametrize(("areas", "message"), [
    ('  acme: ["ftp://host/x"]\n',
     "destination_areas: entry 0 of 'acme': 'ftp://host/x' is not an area; give s3://<bucket>"),
    ('  acme: ["s3://drop/../x"]\n',
     "destination_areas: entry 0 of 'acme': 's3://drop/../x' is not an area"),
    ('  acme: ["s3://drop/acme"]\n  kiwi-outdoors: ["s3://drop"]\n',
     "destination_areas: entry 0 of 'kiwi-outdoors': 's3://drop' overlaps an area of 'acme'; "
     "one location belongs to one company"),
    ('  "Not A Slug": ["s3://drop"]\n', "destination_areas: 'Not A Slug' is not a valid company "
     "id: use lower-case letters, digits, and single '-' or '_' between them (e.g. acme-corp)"),
])
def test_a_bad_area_is_an_error_of_defaults_and_nothing_loads(tmp_path: Path, areas: str,
                                                             message: str):
    config = _config(tmp_path, areas)
    catalog = load_catalog(config)
    (line,) = catalog.errors[str(config / "defaults.yaml")]
    assert line.startswith(f"{config / 'defaults.yaml'}: {message}"), line
    assert not catalog.companies
