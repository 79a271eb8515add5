"""Issue 11 items 5 and 6 on a real scheduler (the shared stack, driven through the REST API):
a config edit adding a destination while an earlier run is registered fails nothing and
applies to the later run only; a destination that is down and comes back gets its file once,
through Airflow's own retries (shortened by each destination's ``retry: {base, cap}``), with
no operator action."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.services.http import WebhookReceiver, start_receiver, stop_receiver
from tests.system.scheduler.harness import SchedulerStack, SlotClock
from tests.system.soak.stack import Api, wait_for

DAG = "widget_export__windowco__daily-spend"
SCHEDULE = "windowco/daily-spend"
# The export hour is the module's clock's (~12 h from its start by default). A slot that falls
# due mid-test anyway (EXPORT_TEST_HOURS_AHEAD=1) runs on time and may deliver to the partner as
# well: the partner's requests are counted per run (the notice's run_key).


def _slots(clock: SlotClock) -> dict[str, str]:
    """The slots the tests trigger by hand, 4-7 days before the newest due one (the demo source
    holds the last 21 days)."""
    return {name: f"{clock.newest - timedelta(days=days):%Y-%m-%dT%H:%M:%SZ}" for name, days in
            (("early", 7), ("later", 6), ("outage", 5), ("window", 4))}


# No automatic catch-up (the slots are triggered by hand) and short delivery retries: the
# export's and its destinations' own settings.
ACME = """\
company:
  id: windowco
  name: Window Corp
  timezone: UTC
  owner: data-team@windowco.example
widget_exports:
  - id: daily-spend
    export_hour: {hour}
    catchup: {{lookback: 36s}}
    window: {{kind: calendar_day}}
    query:
      source: demo_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    destinations:
      - {{id: acme-dir, type: local, path: outbox/windowco/daily-spend, retry: {{base: 3s, cap: 5s}}}}
{extra}"""
PARTNER = ("      - {id: partner, type: webhook, conn_id: partner_hook, endpoint: /hooks/exports,"
           " retry_window: 1d, retry: {base: 3s, cap: 5s}}\n")


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    hook = start_receiver()
    yield hook
    if hook.server.socket.fileno() != -1:
        stop_receiver(hook)


def COMPANIES(clock: SlotClock) -> dict[str, str]:  # noqa: N802 - the harness's name for it
    return {"windowco": ACME.format(hour=clock.hour, extra="")}


def prepare_stack(stack: SchedulerStack) -> None:
    """The partner's webhook connection, made the Airflow way (the stack is running), and
    granted to windowco in defaults.yaml."""
    stack.grant_connection("partner_hook", "webhook", ["windowco"])
    stack.airflow("connections", "add", "partner_hook", "--conn-uri",
                  f"http://127.0.0.1:{RECEIVER['port']}")


RECEIVER: dict[str, int] = {}


@pytest.fixture(scope="module")
def stack(receiver: WebhookReceiver, request: pytest.FixtureRequest) -> SchedulerStack:
    """windowco/daily-spend on the shared stack, its partner connection pointing at
    ``receiver``."""
    RECEIVER["port"] = receiver.port
    return request.getfixturevalue("scheduler_stack")


def _api(stack: SchedulerStack) -> Api:
    """A logged-in client, once the export DAG (not only manual_export) is parsed."""
    stack.wait_for_dags(DAG)
    return stack.api


def _trigger(api: Api, slot: str) -> str:
    return api.ok("POST", f"/api/v2/dags/{DAG}/dagRuns",
                  {"logical_date": slot, "conf": {}})["dag_run_id"]


def _state(api: Api, run_id: str) -> str:
    return api.ok("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}")["state"]


def _tasks(api: Api, run_id: str) -> dict[str, dict]:
    page = api.ok("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=100")
    return {(ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"): ti
            for ti in page["task_instances"]}


def _finished(api: Api, run_id: str, timeout: float) -> str:
    return wait_for(lambda: (s := _state(api, run_id)) in ("success", "failed") and s,
                    timeout, interval=2, what=f"run {run_id} to finish")


def _posts(receiver_state, slot: str) -> int:
    """The partner's requests for the run of ``slot``."""
    key = f"{SCHEDULE}/{slot[:16]}Z"
    return sum(1 for r in receiver_state.requests
               if r["body"] and json.loads(r["body"]).get("run_key") == key)


def _deliveries(stack: SchedulerStack, slot: str) -> dict[str, dict]:
    key = f"{SCHEDULE}/{slot[:16]}Z"
    (run,) = [r for r in stack.ledger_runs() if r["run_key"] == key]
    return {d["destination"]: d for d in run["deliveries"]}


def _edit(stack: SchedulerStack, api: Api, extra: str) -> None:
    """Edit the config and wait until the DAG processor has parsed the new version."""
    stack.write_company("windowco", ACME.format(hour=stack.clock.hour, extra=extra),
                        sync_loaders=False)
    wait_for(lambda: "partner" in (api.ok("GET", f"/api/v2/dags/{DAG}/details")["doc_md"] or ""),
             60, interval=1, what="the edited config to be parsed")


def test_a_destination_added_while_an_earlier_run_is_registered_applies_to_later_runs(
    stack: SchedulerStack, receiver: WebhookReceiver
) -> None:
    started = time.monotonic()
    api, SLOTS = _api(stack), _slots(stack.clock)  # noqa: N806
    early = _trigger(api, SLOTS["early"])
    wait_for(lambda: _tasks(api, early).get("resolve_window", {}).get("state") == "success",
             90, interval=1, what="the early run to be registered")
    api.ok("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": True})  # hold it mid-flight
    _edit(stack, api, PARTNER)
    api.ok("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
    later = _trigger(api, SLOTS["later"])

    assert _finished(api, early, 120) == "success"
    assert _finished(api, later, 120) == "success"
    print(f"config edit scenario: {time.monotonic() - started:.0f} s")
    assert sorted(k for k in _tasks(api, early) if k.startswith("deliver")) == ["deliver[0]"]
    assert sorted(k for k in _tasks(api, later) if k.startswith("deliver")) == [
        "deliver[0]", "deliver[1]"]
    assert {d: v["state"] for d, v in _deliveries(stack, SLOTS["early"]).items()} == {
        "acme-dir": "acknowledged"}
    assert {d: v["state"] for d, v in _deliveries(stack, SLOTS["later"]).items()} == {
        "acme-dir": "acknowledged", "partner": "acknowledged"}
    assert (_posts(receiver.state, SLOTS["early"]), _posts(receiver.state, SLOTS["later"])) == (
        0, 1)


def test_a_destination_down_then_back_gets_its_file_once_through_airflow_retries(
    stack: SchedulerStack, receiver: WebhookReceiver
) -> None:
    started = time.monotonic()
    api, SLOTS = _api(stack), _slots(stack.clock)  # noqa: N806
    port, state = receiver.port, receiver.state
    stop_receiver(receiver)  # the partner is down
    outage = _trigger(api, SLOTS["outage"])
    wait_for(lambda: _tasks(api, outage).get("deliver[1]", {}).get("try_number", 0) >= 2,
             120, interval=1, what="the partner delivery to fail and be retried by Airflow")
    back = start_receiver(port=port, state=state)  # back, without any operator action
    try:
        assert _finished(api, outage, 120) == "success"
    finally:
        stop_receiver(back)
    print(f"outage scenario: {time.monotonic() - started:.0f} s")
    partner = _deliveries(stack, SLOTS["outage"])["partner"]
    assert partner["state"] == "acknowledged" and partner["attempts"] >= 2
    assert _tasks(api, outage)["deliver[1]"]["try_number"] == partner["attempts"]
    assert _posts(state, SLOTS["outage"]) == 1  # exactly one file reached the partner


def test_a_destination_down_past_its_window_is_exhausted_with_its_last_error_and_unresolved(
    stack: SchedulerStack, receiver: WebhookReceiver
) -> None:
    """The partner stays down (the previous test stopped it) and its window is 1 minute: the
    deliver task is retried by Airflow until the window closes, then fails for good; the ledger
    says exhausted with the last error and `exportctl runs --unresolved` lists it."""
    started = time.monotonic()
    api, SLOTS = _api(stack), _slots(stack.clock)  # noqa: N806
    # The worker reads the config at registration: the new window applies to the next run.
    stack.write_company("windowco", ACME.format(
        hour=stack.clock.hour, extra=PARTNER.replace("retry_window: 1d", "retry_window: 1m")),
        sync_loaders=False)
    slot = SLOTS["window"]
    run_id = _trigger(api, slot)

    assert _finished(api, run_id, 240) == "failed"
    print(f"window scenario: {time.monotonic() - started:.0f} s")
    tasks = _tasks(api, run_id)
    assert (tasks["deliver[0]"]["state"], tasks["deliver[1]"]["state"]) == ("success", "failed")
    deliveries = _deliveries(stack, slot)
    assert deliveries["acme-dir"]["state"] == "acknowledged"
    partner = deliveries["partner"]
    assert partner["state"] == "exhausted" and partner["attempts"] >= 2, partner
    assert "Connection refused" in (partner["last_error"] or ""), partner
    assert tasks["deliver[1]"]["try_number"] == partner["attempts"]
    unresolved = stack.exportctl("runs", "--unresolved", "--company", "windowco").stdout
    assert f"{SCHEDULE}/{slot[:16]}Z" in unresolved, unresolved
