"""Issue 11, items 5 and 6 at library level, with an injected clock and a real HTTP server:
a delivery retries until its window closes (slot + retry_window), not for a fixed number of
attempts; a run keeps the destinations it captured; a removed destination is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from export_lib.errors import AuthorizationError, DeliveryError
from tests.services.http import WebhookReceiver, start_receiver, stop_receiver

SLOT = datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # acme/daily-spend, 07:00 Berlin
NEXT_SLOT = datetime(2026, 3, 30, 5, 0, tzinfo=UTC)
NOW = SLOT + timedelta(minutes=5)
WINDOW_END = SLOT + timedelta(days=5)
PARTNER = "      - {id: partner, type: webhook, conn_id: partner_hook, endpoint: /hooks/exports}\n"
# The deliver task's default retry schedule (plugins/export_airflow: 10 min doubling, at most
# 6 h apart): tries at these minutes after the first failure.
TRIES = (0, 10, 30, 70, 150, 310)


def _with_partner(config: Path) -> None:
    """acme/daily-spend also delivers to a partner's webhook."""
    path = config / "acme.yaml"
    text = path.read_text()
    anchor = "      - {id: acme-dir, type: local, path: outbox/acme/daily-spend}\n"
    path.write_text(text.replace(anchor, anchor + PARTNER, 1))


def _without_partner(config: Path) -> None:
    path = config / "acme.yaml"
    path.write_text(path.read_text().replace(PARTNER, "", 1))


@pytest.fixture()
def partner(export_world, monkeypatch: pytest.MonkeyPatch):
    receiver = start_receiver()
    monkeypatch.setenv("AIRFLOW_CONN_PARTNER_HOOK", f"http://127.0.0.1:{receiver.port}")
    export_world.grant_connection("partner_hook", "webhook")
    _with_partner(export_world.config)
    yield receiver
    stop_receiver(receiver)


def _published(world, slot: datetime = SLOT, now: datetime = NOW) -> str:
    from export_lib.pipeline import publish_run, render_run, start_run
    from export_lib.pipeline.stages import RunContext
    from export_lib.storage.stores import open_store

    ledger, store = world.ledger(), open_store()
    key = start_run(ledger, world.schedule(), slot, now=now, ctx=RunContext()).run_key
    rendered = render_run(ledger, store, key, now=now)
    publish_run(ledger, store, key, rendered["attempt_id"], now=now, columns=rendered["columns"])
    return key


def _deliver(world, key: str, destination: str, now: datetime) -> dict:
    from export_lib.pipeline import deliver_run

    return deliver_run(world.ledger(), key, destination, now=now, config_dir=str(world.config))


def test_destination_down_3h_then_back_gets_its_file_once_without_operator_action(
    export_world, partner: WebhookReceiver
) -> None:
    key = _published(export_world)
    port, state = partner.port, partner.state
    stop_receiver(partner)  # the partner's server is down from NOW to NOW + 3 h
    back_at = NOW + timedelta(hours=3)
    outcome = None
    for minutes in TRIES:
        now = NOW + timedelta(minutes=minutes)
        if now >= back_at and partner.server.socket.fileno() == -1:
            partner = start_receiver(port=port, state=state)
        if now < back_at:
            with pytest.raises(DeliveryError, match="will retry until 2026-04-03T05:00:00Z.*"
                               "Connection refused") as info:
                _deliver(export_world, key, "partner", now)
            assert (info.value.retryable, info.value.retry_until) == (True, WINDOW_END)
        else:
            outcome = _deliver(export_world, key, "partner", now)
    again = _deliver(export_world, key, "partner", NOW + timedelta(hours=8))  # a cleared task
    stop_receiver(partner)

    assert outcome is not None and (outcome["state"], outcome["attempts"]) == ("acknowledged", 6)
    assert (again["state"], again["already_delivered"]) == ("acknowledged", True)
    assert len(state.requests) == 1 and list(state.processed.values()) == [1]
    (record,) = [d for d in _deliveries(export_world, key) if d["destination_id"] == "partner"]
    assert [h["outcome"] for h in record["history"]] == ["retryable_failure"] * 5 + ["delivered"]
    assert record["retry_until"] == "2026-04-03T05:00:00+00:00"


def test_destination_down_for_the_whole_window_is_exhausted_with_the_last_error(
    export_world, partner: WebhookReceiver
) -> None:
    key = _published(export_world)
    stop_receiver(partner)  # and it never comes back
    for now in (NOW, NOW + timedelta(days=2), WINDOW_END - timedelta(seconds=1)):
        with pytest.raises(DeliveryError, match="will retry until") as info:
            _deliver(export_world, key, "partner", now)
        assert info.value.retryable is True
    with pytest.raises(DeliveryError, match="exhausted: its retry window closed at "
                       "2026-04-03T05:00:00Z \\(attempt 4 failed\\).*Connection refused") as info:
        _deliver(export_world, key, "partner", WINDOW_END)
    assert info.value.retryable is False  # the Airflow edge fails the task, no more retries

    unresolved = export_world.exportctl("runs", "--unresolved", "--json")
    assert unresolved.returncode == 0, unresolved.stderr
    (run,) = json.loads(unresolved.stdout)
    states = {d["destination"]: (d["state"], d["attempts"]) for d in run["deliveries"]}
    assert states == {"partner": ("exhausted", 4)}  # acme-dir was never delivered here
    (partner_row,) = run["deliveries"]
    assert "Connection refused" in partner_row["last_error"]
    assert partner_row["retry_until_utc"] == "2026-04-03T05:00:00Z"


def test_a_run_registered_after_its_slot_gets_the_whole_window(export_world, partner) -> None:
    from export_lib.pipeline.stages import retry_window_end

    late = SLOT + timedelta(days=9)  # a backfill of a period 9 days old
    key = _published(export_world, now=late)
    run = export_world.ledger().get_run(key)
    (destination,) = [d for d in export_world.schedule().destinations if d.id == "partner"]
    assert retry_window_end(run, destination) == late + timedelta(days=5)


def test_a_destination_added_later_applies_to_later_slots_only(export_world, partner) -> None:
    from export_lib.pipeline import captured_destinations

    _without_partner(export_world.config)
    early = _published(export_world)
    _with_partner(export_world.config)  # the edit lands between the two slots
    later = _published(export_world, slot=NEXT_SLOT, now=NEXT_SLOT)
    ledger = export_world.ledger()
    assert captured_destinations(ledger, early) == ["acme-dir"]
    assert captured_destinations(ledger, later) == ["acme-dir", "partner"]
    assert _deliver(export_world, early, "acme-dir", NOW)["state"] == "acknowledged"


def test_a_destination_removed_before_delivery_is_refused_with_the_reason(
    export_world, partner: WebhookReceiver
) -> None:
    key = _published(export_world)
    _without_partner(export_world.config)
    outcome = _deliver(export_world, key, "partner", NOW)
    kept = _deliver(export_world, key, "acme-dir", NOW)

    assert (outcome["state"], outcome["attempts"]) == ("refused", 0)
    assert kept["state"] == "acknowledged"
    assert partner.state.requests == []
    (record,) = [d for d in _deliveries(export_world, key) if d["destination_id"] == "partner"]
    assert record["last_error"].startswith(
        f"destination 'partner' was removed from {export_world.config / 'acme.yaml'} before "
        "this run was delivered; not delivered")


def test_a_connection_no_longer_granted_is_refused_at_delivery_with_the_reason(
    export_world, partner: WebhookReceiver
) -> None:
    """defaults.yaml takes partner_hook from acme after the run was registered (issue 23):
    the captured destination is not delivered, and the ledger says why and what to do."""
    import yaml

    key = _published(export_world)
    defaults = export_world.config / "defaults.yaml"
    data = yaml.safe_load(defaults.read_text())
    data["connections"]["partner_hook"]["companies"] = ["kiwi-outdoors"]
    defaults.write_text(yaml.safe_dump(data, sort_keys=False))

    outcome = _deliver(export_world, key, "partner", NOW)
    assert (outcome["state"], outcome["attempts"]) == ("refused", 0)
    assert partner.state.requests == []
    (record,) = [d for d in _deliveries(export_world, key) if d["destination_id"] == "partner"]
    assert record["last_error"] == (
        "destination 'partner' is no longer allowed: connection 'partner_hook' belongs to "
        "'kiwi-outdoors' (defaults.yaml 'connections'), not to 'acme'; not delivered. Grant it "
        "again and requeue the delivery to send it after all")
    # acme.yaml itself no longer loads (it names a connection acme may not use): until it is
    # fixed, the company has nobody authorised and nothing of it goes out.
    with pytest.raises(AuthorizationError, match="owner 'data-team@acme.example' is no longer "
                                                 "authorised"):
        _deliver(export_world, key, "acme-dir", NOW)


def _deliveries(world, key: str) -> list[dict]:
    from export_lib.delivery import list_deliveries

    return list_deliveries(world.ledger().engine, key)
