"""One `make run` stack as it ships, for every module of this folder (issues 12, 21, 23, 24, 47).

PostgreSQL, api-server, scheduler, dag-processor, triggerer and the FAB auth manager with a
viewer and an operator role per company and the demo users of ``.airflow/demo-users.json``
(ADR 0023; the shared scheduler stack runs SimpleAuthManager, which cannot scope a user to one
company). Scheduled runs are off (``USE_JOB_SCHEDULE=False``: only triggered runs matter, and
CPU is short); the scheduler still runs triggered ones. The modules were one stack each; a FAB
stack costs ~70 s of a pytest worker to start, so they share this one (one unit of work in
tests/support/workload.py, so one worker runs them one after the other):

* ``test_company_view.py``: support's desk in headless Chromium (issue 47);
* ``test_isolation_and_secrets.py``: tenant isolation, secrets, OpenLineage (issues 12, 23, 24);
* ``test_pg_server.py``: the stack is also `make run` on an existing PostgreSQL server
  (``PG_SERVER``, ``PG_DB_PREFIX``, no template: its databases migrated from scratch, beside a
  neighbour's database); its tests stop the stack, so the file is last (pytest collects a
  folder's files by name).

acme's hourly-clicks export gets two HTTPS webhooks whose connections carry known secrets: one
receiver accepts (and echoes a secret in its answer), one refuses with 401 (echoing another).
acme's operator triggers acme's manual export of hourly-clicks, the admin kiwi-outdoors', both
before any test (their runs are the isolation and secrets tests' material). daily-spend, the
export the company view reschedules and exports now, keeps its one local destination.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
import yaml

from tests.services.http import WebhookReceiver, start_receiver, stop_receiver
from tests.services.lineage import LineageReceiver, start_lineage_receiver, stop_lineage_receiver
from tests.services.tls import make_certificates
from tests.system.scheduler.harness import grant_connection
from tests.system.soak.stack import Api, Stack, now_utc, scratch_dir, stop_and_sweep, wait_for

PG_PREFIX = "pgsrv_"  # the stack's databases on the session's server
NEIGHBOUR = "neighbour_airflow"  # another stack's database on the same server
# Demo users of `make run` (ADR 0023).
OPERATOR, VIEWER, OTHER = "acme-operator", "acme-viewer", "kiwi-outdoors-operator"
HOOKED = "acme/hourly-clicks"  # the export with the webhooks; its manual run is the tenants'
SECRETS = {
    "hook password": "pw-Sekret-1a2b3c",
    "hook token": "tok-Sekret-4d5e6f",
    # A Standard Webhooks secret: whsec_ + base64 of 36 bytes ("sig-Sekret-7a8b9c-never-...").
    "hook signing secret": "whsec_c2lnLVNla3JldC03YThiOWMtbmV2ZXItZWxzZXdoZXJlLTAw",
    "hook path": "path-Sekret-0d1e2f",
    "echoed by the accepting receiver": "echo-Sekret-ok-3a4b",
    "down token": "tok-Sekret-down-5c6d",
    "down path": "path-Sekret-down-7e8f",
    "echoed by the refusing receiver": "echo-Sekret-down-9a0b",
}
WEBHOOKS = (
    "      - {id: acme-hook, type: webhook, conn_id: acme_hook, endpoint: /exports}\n"
    "      - {id: acme-hook-down, type: webhook, conn_id: acme_hook_down, endpoint: /exports}\n")
ANCHOR = "      - {id: acme-dir, type: local, path: outbox/acme/hourly-clicks}\n"
# daily-spend restates late data, so acme has a restatement DAG (ADR 0023); written as a line
# of its own, so the file keeps the shape the company view's reschedule edits.
RESTATE_ANCHOR = "    deadline: 2h\n"
RESTATE = "    late_data: {policy: restate, grace: 1h}\n"


@dataclass
class World:
    stack: Stack
    admin: Api
    users: dict  # demo-users.json: name -> {company, role, password}
    analyst: Api  # acme's operator, signed in
    viewer: Api  # acme's viewer, signed in
    ok: WebhookReceiver
    down: WebhookReceiver
    lineage: LineageReceiver
    acme_run: dict  # the tenants' manual DAG runs, terminal
    kiwi_run: dict

    @property
    def base(self) -> str:  # http://127.0.0.1:<port>
        return self.admin.base

    def acme_manual_key(self) -> str:
        """The ledger's run key of the tenants' acme manual run (the company view adds one of
        its own, for another window)."""
        start = self.acme_run["conf"]["window_start"].replace("+00:00", "Z")
        (key,) = [r["run_key"] for r in self.stack.ledger_runs()
                  if r["run_key"].startswith("acme/manual/") and r["window_start_utc"] == start]
        return key


def terminal(api: Api, run: dict) -> dict | None:
    now = api.ok("GET", f"/api/v2/dags/{run['dag_id']}/dagRuns/{quote(run['dag_run_id'])}")
    return now if now["state"] in ("success", "failed") else None


def _configure(config: Path) -> None:
    acme = config / "acme.yaml"
    text = acme.read_text()
    assert text.count(ANCHOR) == 1 and text.count(RESTATE_ANCHOR) == 1
    acme.write_text(text.replace(ANCHOR, ANCHOR + WEBHOOKS).replace(
        RESTATE_ANCHOR, RESTATE + RESTATE_ANCHOR))
    for conn_id in ("acme_hook", "acme_hook_down"):
        grant_connection(config, conn_id, "webhook", ["acme"])
    kiwi = config / "kiwi-outdoors.yaml"
    data = yaml.safe_load(kiwi.read_text())
    (widget,) = [w for w in data["widget_exports"] if w["id"] == "six-hourly-orders"]
    widget["late_data"] = {"policy": "restate", "grace": "1h"}
    kiwi.write_text(yaml.safe_dump(data, sort_keys=False))


@contextmanager
def tenant_world() -> Iterator[World]:
    """The stack with both manual runs terminal (see the module's docstring)."""
    root = scratch_dir("export-tenants-")
    certs = make_certificates(root / "tls")
    os.chmod(root / "tls", 0o755)
    ok = start_receiver(certs.server_context())
    down = start_receiver(certs.server_context())
    ok.state.token, ok.state.signing_secret = SECRETS["hook token"], SECRETS["hook signing secret"]
    ok.state.echo_secret = SECRETS["echoed by the accepting receiver"]
    down.state.token = "not-what-the-connection-sends"
    down.state.echo_secret = SECRETS["echoed by the refusing receiver"]
    ca = quote(str(certs.ca_file), safe="")
    lineage = start_lineage_receiver()
    stack = Stack.in_copy(
        root / "project",
        EXPORT_CATCHUP_LOOKBACK_HOURS="1",
        AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="False",
        AIRFLOW_CONN_ACME_HOOK=(
            f"https://svc:{SECRETS['hook password']}@127.0.0.1:{ok.port}/hooks/"
            f"{SECRETS['hook path']}?token={SECRETS['hook token']}"
            f"&signing_secret={SECRETS['hook signing secret']}&ca_file={ca}"),
        AIRFLOW_CONN_ACME_HOOK_DOWN=(
            f"https://127.0.0.1:{down.port}/x/{SECRETS['down path']}"
            f"?token={SECRETS['down token']}&ca_file={ca}"),
        # OpenLineage (ADR 0027) on a running scheduler: every task reports to this receiver,
        # and the events are one more place no secret may appear.
        AIRFLOW__OPENLINEAGE__TRANSPORT=lineage.transport(),
        AIRFLOW__OPENLINEAGE__NAMESPACE="exports-tenants",
        AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD="True",
    )
    # `make run` on an existing server (issue 21 item 3): no template, so its databases are
    # created and migrated from scratch under a fixed prefix, beside a neighbour's database;
    # the port is learnt from PG_SERVER.
    stack.template_prefix, stack.db_prefix, stack.pgport = "", PG_PREFIX, None
    with psycopg.connect(stack.pg_server + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{NEIGHBOUR}"')
    _configure(stack.root / "dags" / "config")
    try:
        started = time.monotonic()
        stack.start()
        admin = stack.api()
        wait_for(lambda: admin.call("GET", "/api/v2/dags/manual_export__kiwi-outdoors")[0] == 200,
                 120, interval=1, what="kiwi-outdoors' manual DAG")
        users = json.loads((stack.root / ".airflow" / "demo-users.json").read_text())
        assert {(u["company"], u["role"]) for u in users.values()} == {
            (c, r) for c in ("acme", "dentsu-happiness", "kiwi-outdoors")
            for r in ("viewer", "operator")}
        people = {name: Api(admin.base).login(name, users[name]["password"])
                  for name in (OPERATOR, VIEWER, OTHER)}
        # A DAG's permissions reach a signed-in user within FAB's user cache ([fab] cache_ttl,
        # 30 s): until then restatement__acme answered the operator 403 (CI, 3 Dec).
        readable = [(OPERATOR, "widget_export__acme__daily-spend"),
                    (OTHER, "manual_export__kiwi-outdoors")] + [
            (user, dag) for user in (OPERATOR, VIEWER)
            for dag in ("manual_export__acme", "restatement__acme")]
        wait_for(lambda: all(people[user].call("GET", f"/api/v2/dags/{dag}")[0] == 200
                             for user, dag in readable),
                 120, interval=2, what="each company's DAGs readable by its users")
        day = now_utc() - timedelta(days=2)
        acme_run = people[OPERATOR].trigger_manual("acme", HOOKED, day, "tenant test")
        kiwi_run = admin.trigger_manual("kiwi-outdoors", "kiwi-outdoors/six-hourly-orders", day,
                                        "tenant test")
        acme_run = wait_for(lambda: terminal(admin, acme_run), 400, what="acme's manual run")
        kiwi_run = wait_for(lambda: terminal(admin, kiwi_run), 400, what="kiwi's manual run")
        print(f"stack up and both manual runs terminal after {time.monotonic() - started:.0f} s")
        yield World(stack, admin, users, people[OPERATOR], people[VIEWER], ok, down, lineage,
                    acme_run, kiwi_run)
    finally:
        try:
            stop_and_sweep(stack)
        finally:
            with psycopg.connect(stack.pg_server + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{NEIGHBOUR}" WITH (FORCE)')
            stop_receiver(ok)
            stop_receiver(down)
            stop_lineage_receiver(lineage)
            shutil.rmtree(root, ignore_errors=True)
