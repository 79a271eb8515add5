"""``recover_missed``: a scheduled run hands its DAG's missed slots to an Airflow backfill.

ADR 0006. Export DAGs use ``catchup=False``: the scheduler always creates the newest due slot
at once, so the current slot never waits behind a backlog. Missed slots (an outage, a new DAG
within the lookback) are recovered by this task, in scheduled runs of ``recovery: each``
schedules only: it finds the slots before its own that have no run and creates **one Airflow
backfill** over them through the public REST API (``POST /api/v2/backfills``, the same path as
the UI's backfill dialog), oldest first, ``max_active_runs`` = the catch-up budget,
``reprocess_behavior=none``. Backfill runs are ordered after scheduled runs by the scheduler, and
the cluster policy sends their renders to the ``export_catchup`` pool.

No task touches the metadata database: the API is reached with the credentials of the Airflow
connection ``export_airflow_api`` (``make run`` defines it; in production an operator creates it
in the UI or a secrets backend). Idempotent: a dry run first lists the slots still without a run;
none → nothing to do; Airflow allows one active backfill per DAG and never creates a second run
for a logical date.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from export_airflow.metrics import emit

API_CONN_ID = "export_airflow_api"
TIMEOUT_S = 30


def catchup_lookback() -> timedelta:
    """How far back a scheduled run looks for missed slots at least
    (``EXPORT_CATCHUP_LOOKBACK_HOURS``, default 48 h; it reaches further back to the previous
    run after an outage)."""
    return timedelta(hours=float(os.environ.get("EXPORT_CATCHUP_LOOKBACK_HOURS", "48")))


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class AirflowApi:
    """The public REST API, authenticated with a JWT from ``/auth/token``."""

    base_url: str
    username: str
    password: str
    token: str | None = None

    @classmethod
    def from_connection(cls, conn_id: str = API_CONN_ID) -> AirflowApi:
        conn = BaseHook.get_connection(conn_id)
        extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
        base = extra.get("base_url") or (
            f"{conn.schema if conn.schema in ('http', 'https') else 'http'}://{conn.host}"
            + (f":{conn.port}" if conn.port else ""))
        if not conn.host and not extra.get("base_url"):
            raise AirflowFailException(
                f"connection {conn_id!r} has no host: set it to the API server, e.g. "
                f"http://USER:PASSWORD@localhost:8080 (or extra base_url)")
        return cls(base.rstrip("/"), conn.login or "", conn.password or "")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                status, payload = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload.decode(errors="replace")

    def login(self) -> None:
        status, payload = self.call("POST", "/auth/token",
                                    {"username": self.username, "password": self.password})
        if status not in (200, 201):
            raise AirflowFailException(
                f"connection {API_CONN_ID!r}: {self.base_url}/auth/token refused the "
                f"credentials (HTTP {status}: {payload}); fix the connection's login/password")
        self.token = payload["access_token"]

    def previous_automated_slot(self, dag_id: str, slot: datetime) -> datetime | None:
        query = urllib.parse.urlencode(
            [("logical_date_lt", _iso(slot)), ("run_type", "scheduled"),
             ("run_type", "backfill"), ("order_by", "-logical_date"), ("limit", "1")])
        status, payload = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}")
        if status != 200:
            raise RuntimeError(f"GET dagRuns of {dag_id}: HTTP {status}: {payload}")
        runs = payload["dag_runs"]
        return datetime.fromisoformat(runs[0]["logical_date"]) if runs else None


class RecoverMissedOperator(BaseOperator):
    """Backfill the missed slots before this scheduled run's slot (recovery ``each``).

    :param schedule_id: e.g. ``acme/daily-spend`` (templated)
    :param config_dir: the config catalog directory (templated)
    """

    template_fields: Sequence[str] = ("schedule_id", "config_dir")
    ui_color = "#f0f0f0"

    def __init__(self, *, schedule_id: str, config_dir: str, **kwargs: Any) -> None:
        # Its own retry budget, not the export's 5-day one (default_args are merged in before
        # __init__, so these are set, not defaulted): an unreachable API is an incident.
        kwargs.update(retries=3, retry_delay=timedelta(minutes=2), retry_exponential_backoff=0,
                      execution_timeout=timedelta(minutes=5))
        super().__init__(**kwargs)
        self.schedule_id = schedule_id
        self.config_dir = config_dir

    def execute(self, context: Any) -> dict[str, Any]:
        from export_lib.config.loader import load_catalog
        from export_lib.periods.recovery import CATCHUP_BUDGET, recovery_range

        dag_run = context["dag_run"]
        run_type = str(dag_run.run_type).split(".")[-1].lower()
        if run_type != "scheduled":
            raise AirflowSkipException(f"{run_type} run: only scheduled runs recover missed slots")
        company = self.schedule_id.split("/", 1)[0]
        schedule = load_catalog(self.config_dir, only=company).schedule(self.schedule_id)
        slot = dag_run.logical_date
        fields = (company, self.schedule_id, f"{slot:%Y-%m-%dT%H:%MZ}")
        api = AirflowApi.from_connection()
        api.login()
        dag_id = dag_run.dag_id
        previous = api.previous_automated_slot(dag_id, slot)
        wanted = recovery_range(schedule.timing, slot, previous=previous,
                                lookback=catchup_lookback(),
                                effective_from=schedule.effective_from)
        if wanted is None:
            self.log.info("company=%s schedule=%s period=%s: no missed slots", *fields)
            emit("gauge", "catchup.backlog", company, self.schedule_id, 0)
            return {"backfill_id": None, "missed": 0}
        body = {"dag_id": dag_id, "from_date": _iso(wanted.first), "to_date": _iso(wanted.last),
                "run_backwards": False, "reprocess_behavior": "none",
                "max_active_runs": CATCHUP_BUDGET, "dag_run_conf": {}}
        status, dry = api.call("POST", "/api/v2/backfills/dry_run", body)
        if status != 200:
            raise RuntimeError(f"backfill dry run for {dag_id}: HTTP {status}: {dry}")
        todo = sorted(datetime.fromisoformat(r["logical_date"]) for r in dry["backfills"])
        emit("gauge", "catchup.backlog", company, self.schedule_id, len(todo))
        if not todo:
            self.log.info("company=%s schedule=%s period=%s: every slot of %s has a run",
                          *fields, wanted.describe())
            return {"backfill_id": None, "missed": 0}
        body.update(from_date=_iso(todo[0]), to_date=_iso(todo[-1]))
        status, created = api.call("POST", "/api/v2/backfills", body)
        if status == 409:
            # One active backfill per DAG (an operator's, or an earlier recovery): the next
            # scheduled run looks again (the range always covers the lookback).
            self.log.warning("company=%s schedule=%s period=%s: %d missed slots not recovered "
                             "yet: %s; the next scheduled run retries", *fields, len(todo),
                             created.get("detail") if isinstance(created, dict) else created)
            return {"backfill_id": None, "missed": len(todo), "deferred": True}
        if status not in (200, 201):
            raise RuntimeError(f"backfill of {dag_id}: HTTP {status}: {created}")
        self.log.info("company=%s schedule=%s period=%s: backfill %s recovers %d missed slots "
                      "%s .. %s, oldest first, %d at a time", *fields, created["id"], len(todo),
                      body["from_date"], body["to_date"], CATCHUP_BUDGET)
        return {"backfill_id": created["id"], "missed": len(todo),
                "first": body["from_date"], "last": body["to_date"]}
