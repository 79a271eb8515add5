"""Airflow's public REST API, as the catch-up and the gap audit use it: plain HTTP, no Airflow
import (ADR 0006, ADR 0009).

Backfills are created the way the UI's backfill dialog creates them (``POST
/api/v2/backfills``): oldest first, ``reprocess_behavior=none`` (a slot that already has a DAG
run is never run twice), ``max_active_runs`` = the catch-up budget. A dry run first lists the
slots still without a run, so asking twice creates nothing the second time. The credentials
are those of the Airflow connection ``export_airflow_api`` (``http://USER:PASSWORD@HOST:PORT``
or extra ``base_url``): the operators resolve it through Airflow, ``exportctl`` through
``AIRFLOW_CONN_EXPORT_AIRFLOW_API``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from export_lib.errors import ConfigError, OrchestratorError, OrchestratorTimeout
from export_lib.periods.recovery import CATCHUP_BUDGET

API_CONN_ID = "export_airflow_api"
TIMEOUT_S = 30
# A backfill dry run (and the create after it) costs Airflow ~1.4 ms a slot on the slow 2-core
# machine whatever the timetable (bench/backfill_dry_run.py): the client waits 30 s + 10 ms a
# slot, above the server's work, so a big range is not abandoned and asked for again while the
# server still computes the first answer.
PER_SLOT_S = 0.010
MAX_TIMEOUT_S = 240
ACTIVE_RUN_STATES = ("queued", "running")


def api_instant(value: datetime) -> str:
    """An instant as the REST API takes it: ``2026-03-29T05:00:00.000000Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class BackfillOutcome:
    """What a backfill request did: ``created`` slots in backfill ``backfill_id``; ``deferred``
    when Airflow refused because the DAG already has an active backfill (409), or did not
    answer in time (asked again by the next scheduled run or audit, not at once)."""

    dag_id: str
    asked: int
    created: tuple[datetime, ...] = ()
    backfill_id: int | None = None
    deferred: str | None = None

    def describe(self) -> str:
        if self.deferred:
            return (f"{self.dag_id}: {self.asked} slot(s) not requested yet: {self.deferred}; "
                    "the next scheduled run (or audit) asks again")
        if not self.created:
            return f"{self.dag_id}: every one of {self.asked} slot(s) already has an Airflow run"
        return (f"{self.dag_id}: backfill {self.backfill_id} runs {len(self.created)} slot(s) "
                f"{self.created[0]:%Y-%m-%dT%H:%MZ} .. {self.created[-1]:%Y-%m-%dT%H:%MZ}, "
                f"oldest first, {CATCHUP_BUDGET} at a time")


@dataclass
class AirflowApi:
    """The public REST API, authenticated with a JWT from ``/auth/token``."""

    base_url: str
    username: str
    password: str
    token: str | None = None
    conn_id: str = API_CONN_ID
    timeout_s: float = TIMEOUT_S  # a plain call's; a backfill request adds PER_SLOT_S a slot

    @classmethod
    def from_connection(cls, conn: Any) -> AirflowApi:
        """From a connection's fields (``host``, ``port``, ``schema``, ``login``, ``password``,
        ``extra``): an export_lib ``Connection`` or an Airflow one."""
        extra = getattr(conn, "extra_dejson", None) or getattr(conn, "extra", None) or {}
        if not isinstance(extra, dict):
            extra = {}
        if not conn.host and not extra.get("base_url"):
            raise ConfigError(
                f"connection {conn.conn_id!r} has no host: set it to the API server, e.g. "
                "http://USER:PASSWORD@localhost:8080 (or extra base_url)")
        scheme = conn.schema if conn.schema in ("http", "https") else "http"
        base = extra.get("base_url") or (f"{scheme}://{conn.host}"
                                         + (f":{conn.port}" if conn.port else ""))
        return cls(base.rstrip("/"), conn.login or "", conn.password or "", conn_id=conn.conn_id)

    def call(self, method: str, path: str, body: Any = None, *, timeout: float | None = None
             ) -> tuple[int, Any]:
        """One request (never repeated here). :raises OrchestratorTimeout: no answer within
        ``timeout`` (default :attr:`timeout_s`); OrchestratorError: unreachable."""
        timeout = self.timeout_s if timeout is None else timeout
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, payload = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None),
                                                           TimeoutError):
                raise OrchestratorTimeout(
                    f"{method} {path}: the Airflow API at {self.base_url} did not answer within "
                    f"{timeout:.0f} s (it may still be working on it)") from exc
            raise OrchestratorError(f"connection {self.conn_id!r}: the Airflow API at "
                                    f"{self.base_url} is unreachable ({exc}); is the api-server "
                                    "up?") from exc
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload.decode(errors="replace")

    def login(self) -> AirflowApi:
        status, payload = self.call("POST", "/auth/token",
                                    {"username": self.username, "password": self.password})
        if status not in (200, 201):
            raise ConfigError(
                f"connection {self.conn_id!r}: {self.base_url}/auth/token refused the "
                f"credentials (HTTP {status}: {payload}); fix the connection's login/password")
        self.token = payload["access_token"]
        return self

    def pages(self, path: str, key: str, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Every record of a paginated list endpoint (``key``: its list member); a 404 (the
        DAG is not parsed yet) is an empty list."""
        found: list[dict[str, Any]] = []
        while True:
            query = urllib.parse.urlencode([*params, ("limit", "100"),
                                            ("offset", str(len(found)))])
            status, payload = self.call("GET", f"{path}?{query}")
            if status == 404:
                return []
            if status != 200:
                raise OrchestratorError(f"GET {path}: HTTP {status}: {payload}")
            found.extend(payload[key])
            if not payload[key] or len(found) >= payload["total_entries"]:
                return found

    def _runs(self, dag_id: str, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return self.pages(f"/api/v2/dags/{dag_id}/dagRuns", "dag_runs", params)

    def previous_automated_slot(self, dag_id: str, slot: datetime) -> datetime | None:
        """The newest scheduled or backfill run's logical date before ``slot``."""
        query = urllib.parse.urlencode(
            [("logical_date_lt", api_instant(slot)), ("run_type", "scheduled"),
             ("run_type", "backfill"), ("order_by", "-logical_date"), ("limit", "1")])
        status, payload = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}")
        if status != 200:
            raise OrchestratorError(f"GET dagRuns of {dag_id}: HTTP {status}: {payload}")
        runs = payload["dag_runs"]
        return datetime.fromisoformat(runs[0]["logical_date"]) if runs else None

    def active_slots(self, dag_id: str, since: datetime, until: datetime) -> set[datetime]:
        """Logical dates in ``[since, until)`` with a queued or running DAG run (in flight in
        Airflow, perhaps not registered in the ledger yet)."""
        params = [("logical_date_gte", api_instant(since)),
                  ("logical_date_lt", api_instant(until)),
                  *(("state", s) for s in ACTIVE_RUN_STATES)]
        return {datetime.fromisoformat(r["logical_date"]).astimezone(UTC)
                for r in self._runs(dag_id, params) if r.get("logical_date")}

    def request_backfill(self, dag_id: str, slots: Iterable[datetime]) -> BackfillOutcome:
        """One backfill over ``slots`` (oldest to newest, runs only where no DAG run exists)."""
        wanted = sorted(slots)
        if not wanted:
            return BackfillOutcome(dag_id, 0)
        body = {"dag_id": dag_id, "from_date": api_instant(wanted[0]),
                "to_date": api_instant(wanted[-1]), "run_backwards": False,
                "reprocess_behavior": "none", "max_active_runs": CATCHUP_BUDGET,
                "dag_run_conf": {}}
        timeout = min(self.timeout_s + PER_SLOT_S * len(wanted), MAX_TIMEOUT_S)
        try:
            return self._backfill(dag_id, wanted, body, timeout)
        except OrchestratorTimeout as exc:
            # Not asked again now: a second request would only queue behind the first on a
            # busy api-server. The range always covers the lookback, so the next scheduled
            # run (or audit) asks again; a backfill the server did create is seen then.
            return BackfillOutcome(dag_id, len(wanted), deferred=str(exc))

    def _backfill(self, dag_id: str, wanted: list[datetime], body: dict[str, Any],
                  timeout: float) -> BackfillOutcome:
        status, dry = self.call("POST", "/api/v2/backfills/dry_run", body, timeout=timeout)
        if status == 404:
            return BackfillOutcome(dag_id, len(wanted), deferred=(
                "Airflow does not know this DAG (not parsed yet, or its company file has "
                "errors: see Airflow's import errors)"))
        if status != 200:
            raise OrchestratorError(f"backfill dry run for {dag_id}: HTTP {status}: {dry}")
        todo = sorted(datetime.fromisoformat(r["logical_date"]).astimezone(UTC)
                      for r in dry["backfills"])
        if not todo:
            return BackfillOutcome(dag_id, len(wanted))
        body.update(from_date=api_instant(todo[0]), to_date=api_instant(todo[-1]))
        status, created = self.call("POST", "/api/v2/backfills", body, timeout=timeout)
        if status == 409:
            detail = created.get("detail") if isinstance(created, dict) else created
            return BackfillOutcome(dag_id, len(wanted), deferred=f"HTTP 409: {detail}")
        if status not in (200, 201):
            raise OrchestratorError(f"backfill of {dag_id}: HTTP {status}: {created}")
        return BackfillOutcome(dag_id, len(wanted), tuple(todo), created["id"])


def trigger_once(api: AirflowApi, dag_id: str, run_id: str, conf: dict[str, Any]) -> str:
    """Trigger ``dag_id`` with ``conf`` as run ``run_id``, once: ``requested`` when created,
    ``already requested`` when Airflow has a run of that id (HTTP 409), ``deferred: …`` when
    the DAG is unknown (not parsed yet). :raises OrchestratorError: any other answer."""
    status, body = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                            {"dag_run_id": run_id, "logical_date": None, "conf": conf})
    if status in (200, 201):
        return "requested"
    if status == 409:
        return "already requested"
    if status == 404:
        return ("deferred: Airflow does not know this DAG (not parsed yet, or its company file "
                "has errors: see Airflow's import errors)")
    raise OrchestratorError(f"trigger of {dag_id} run {run_id}: HTTP {status}: {body}")


def api_from_environment(environ: dict[str, str] | None = None) -> AirflowApi:
    """The API client of ``exportctl``: ``AIRFLOW_CONN_EXPORT_AIRFLOW_API`` (logged in)."""
    from export_lib.source.connections import get_connection

    return AirflowApi.from_connection(get_connection(API_CONN_ID, environ)).login()


__all__ = ["API_CONN_ID", "AirflowApi", "BackfillOutcome", "api_from_environment",
           "api_instant"]
