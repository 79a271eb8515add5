"""E-mail recipients are checked against the company's owner and ``authorized`` at config load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from export_lib.config.loader import load_catalog
from export_lib.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
MAIL = ("      - {id: acme-mail, type: email, conn_id: smtp_default, "
        "to: [analytics@acme.example, DATA-TEAM@acme.example%s]}\n")


def _catalog_with_mail(tmp_path: Path, extra: str) -> Path:
    config = tmp_path / "config"
    shutil.copytree(REPO / "dags" / "config", config)
    acme = config / "acme.yaml"
    text = acme.read_text()
    anchor = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
    assert anchor in text
    acme.write_text(text.replace(anchor, anchor + MAIL % extra, 1))
    return config


def test_owner_and_authorized_recipients_load(tmp_path: Path) -> None:
    catalog = load_catalog(_catalog_with_mail(tmp_path, ""))
    catalog.raise_for_errors()
    (mail,) = [d for d in catalog.schedule("acme/daily-spend").destinations if d.id == "acme-mail"]
    assert mail.to == ("analytics@acme.example", "DATA-TEAM@acme.example")


def test_recipient_outside_the_company_is_a_config_error_naming_file_and_field(
    tmp_path: Path,
) -> None:
    config = _catalog_with_mail(tmp_path, ", rival@kiwi.example")
    catalog = load_catalog(config)
    with pytest.raises(ConfigError) as info:
        catalog.raise_for_errors()
    assert info.value.issues == [
        f"{config / 'acme.yaml'}: acme/daily-spend: destinations[acme-mail].to: "
        "'rival@kiwi.example' is neither company.owner nor in company.authorized; add it to "
        "company.authorized or remove it from the destination"]
    assert "acme" not in catalog.companies and "kiwi-outdoors" in catalog.companies
