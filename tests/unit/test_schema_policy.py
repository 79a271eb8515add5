"""``schema_policy`` in the config (export_lib.config.schema_policy, ADR 0025): optional and
``fail`` when left out, settable per export or for every export under ``policies:``, a bad value
named with its file, field and the fix, and part of ``config_version`` only when not ``fail``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from export_lib.config.loader import load_catalog
from tests.support.one_company import company_yaml, config_dir_with_defaults


@pytest.fixture()
def config_dir(tmp_path: Path) -> Path:
    return config_dir_with_defaults(tmp_path)


def _catalog(config_dir: Path, extra: str = ""):
    (config_dir / "t.yaml").write_text(company_yaml(extra))
    return load_catalog(config_dir)


def test_left_out_it_is_fail_and_the_config_version_is_what_it_was(config_dir):
    plain = _catalog(config_dir).schedule("t/daily")
    explicit = _catalog(config_dir, "    schema_policy: fail\n").schedule("t/daily")
    assert plain.policies.schema_policy == explicit.policies.schema_policy == "fail"
    # fail written out means what leaving it out means: the same version, and none of the
    # versions runs captured before the field existed moves.
    assert explicit.config_version == plain.config_version
    assert "schema_policy" not in plain.content()["policies"]
    assert plain.snapshot()["policies"]["schema_policy"] == "fail"  # a run records it


@pytest.mark.parametrize("policy", ["warn", "new_major"])
def test_another_policy_is_a_new_config_version(config_dir, policy):
    plain = _catalog(config_dir).schedule("t/daily")
    other = _catalog(config_dir, f"    schema_policy: {policy}\n").schedule("t/daily")
    assert other.policies.schema_policy == policy
    assert other.config_version != plain.config_version


def test_defaults_set_it_for_every_export_and_an_export_overrides_it(config_dir):
    path = config_dir / "defaults.yaml"
    data = yaml.safe_load(path.read_text())
    data["policies"]["schema_policy"] = "new_major"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _catalog(config_dir).schedule("t/daily").policies.schema_policy == "new_major"
    assert _catalog(config_dir, "    schema_policy: warn\n").schedule(
        "t/daily").policies.schema_policy == "warn"


@pytest.mark.parametrize(("value", "shown", "hint"), [
    ("fial", "'fial'", "; did you mean 'fail'?"),
    ("new-major", "'new-major'", "; did you mean 'new_major'?"),
    ("true", "True", ""),  # YAML's true: not a policy
])
def test_a_bad_value_is_named_with_its_file_field_and_the_fix(config_dir, value, shown, hint):
    path = config_dir / "t.yaml"
    errors = _catalog(config_dir, f"    schema_policy: {value}\n").errors[str(path)]
    assert errors == (
        f"{path}: widget_exports[0].schema_policy: schema_policy {shown} is not one of fail, "
        "warn, new_major (when the source's columns or types differ from the published "
        "schema: fail stops the run with the diff, warn publishes and alerts once, new_major "
        f"publishes the next major version of the file name){hint}",)
