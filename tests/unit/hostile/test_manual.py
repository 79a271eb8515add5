"""The hostile manual-request corpus (``manual_requests.py``) against the real pipeline entry
``start_manual`` on a world (tests/world.py): one ConfigError naming the request field, and
nothing registered or written."""

from __future__ import annotations

import pytest

from export_lib.errors import ConfigError
from export_lib.pipeline import start_manual
from tests.support.manual_requests import CASES, NOW, VALID
from tests.world import World


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    from tests.world import build_world

    return build_world(tmp_path_factory.mktemp("manual"))


def start(world: World, params: dict, config_dir=None):
    return start_manual(world.ledger(), str(config_dir or world.config), params,
                        run_id="manual__hostile", requested_at=NOW, now=NOW, ctx=None)


@pytest.mark.parametrize(("params", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_hostile_request_is_one_error_and_registers_nothing(world: World, params, pattern):
    before = world.counts()
    with pytest.raises(ConfigError, match=pattern) as raised:
        start(world, {**VALID, **params})
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 700
    assert world.counts() == before
    assert world.visible_files() == {}


def test_ids_are_checked_before_any_file_is_read(world: World, tmp_path):
    """A bad company id fails on its pattern even where no config directory exists: the id
    never reaches the filesystem."""
    with pytest.raises(ConfigError, match=r"manual export form: company: '\.\./\.\./etc/passwd' "
                                          r"is not a valid company id"):
        start(world, {**VALID, "company": "../../etc/passwd"}, config_dir=tmp_path / "missing")


def test_the_valid_request_registers_with_only_the_requested_columns(world: World):
    summary = start(world, {**VALID, "columns": ["event_time", "value"]})
    assert (summary.created, summary.company) == (True, "acme")
    run = world.ledger().get_run(summary.run_key)
    assert run.config_snapshot["query"]["columns"] == ["event_time", "value"]
    assert run.config_snapshot["query"]["tenant_column"] == "company_id"
