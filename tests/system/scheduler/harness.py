"""The scheduler harness: a real `make run` Airflow with a test's own company config.

``SchedulerStack.start(root, companies, env)`` copies the project (``tests/system/soak/stack.py``),
replaces the demo companies in ``dags/config/`` by the test's (``defaults.yaml`` stays),
runs ``exportctl loaders dags`` so the loaders match, and starts the stack (PostgreSQL,
api-server, scheduler, dag-processor, triggerer, LocalExecutor). The test then acts as people
do — the REST API (:meth:`trigger`, :meth:`clear`, :meth:`mark`, :meth:`pause`) and the
``airflow`` / ``exportctl`` command lines with the stack's environment (:meth:`airflow`,
:meth:`exportctl`) — and asserts on Airflow's state (:meth:`wait_for_run`,
:meth:`wait_for_task`, :meth:`task_states`) and on the ledger (:meth:`counts`,
:meth:`ledger`). A wait that times out fails with every task's state and the log tail of the
tasks that did not succeed.

Over 400 lines on purpose: it is the one vocabulary every scheduler module speaks (stack,
config, REST, CLI, ledger, waits); split, each module would import from four places.

Company configs are YAML text or dicts; :func:`widget_export` builds a small widget export on
the demo source (``exportctl demo seed`` fills it for every configured company at setup).
Nothing is scheduled beyond what the config asks: with ``recovery: latest`` a new DAG runs its
latest slot once, and :class:`SlotClock` keeps the next slot ~12 h away (read at the module's
start: ``scheduler_stack.clock``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from export_lib.config.dag_loaders import sync_loaders
from tests.support.cli import exportctl as run_exportctl
from tests.system.soak.stack import Api, Stack, ledger_runs_at, stop_and_sweep

DONE = ("success", "failed", "skipped", "upstream_failed", "removed")
# The project's own DAGs a fixture config keeps (the demo companies' loaders go, demo_feed
# too: it would keep adding rows to the source the tests export).
# each company's loader brings its manual_export__<id> (and restatement__<id> when it restates)
KEPT_DAG_FILES = ("config_check.py",)


# How far ahead of a module's start its next daily slot lies. 12 h (the default) keeps any slot
# from falling due while a module runs, whatever the hour; EXPORT_TEST_HOURS_AHEAD=1 puts every
# module's next slot at the next full hour instead (run the tier shortly before one to have
# slots fall due mid-test: tests/system/scheduler/README.md, "The clock").
HOURS_AHEAD = int(os.environ.get("EXPORT_TEST_HOURS_AHEAD", "12"))
if not 1 <= HOURS_AHEAD <= 23:
    raise ValueError(f"EXPORT_TEST_HOURS_AHEAD={HOURS_AHEAD}: give 1 to 23 (hours from a "
                     "module's start to its next daily slot)")
# A module's setup (its companies written, their DAGs serialised, each DAG's first run created)
# takes well under this: a full hour nearer than this to the module's start is passed over for
# the next one, so the newest due slot a module computes is the one the scheduler runs first,
# whatever the minute the module starts at.
# EXPORT_TEST_SLOT_MARGIN_SECONDS (30-600) narrows it for a shifted run: at 2 min and modules
# of 20-150 s, a slot almost never falls due inside a module (two runs straddling a full hour on
# 2 Dec: none did); at 45 s every module starting 45-150 s before the hour has it fall due
# after its setup, mid-test.
SLOT_MARGIN = timedelta(seconds=int(os.environ.get("EXPORT_TEST_SLOT_MARGIN_SECONDS", "120")))
if not timedelta(seconds=30) <= SLOT_MARGIN <= timedelta(minutes=10):
    raise ValueError(f"EXPORT_TEST_SLOT_MARGIN_SECONDS={SLOT_MARGIN.total_seconds():.0f}: give "
                     "30 to 600 (seconds a module's setup may take before its next slot)")


@dataclass(frozen=True)
class SlotClock:
    """A module's daily slots, read when the module starts (``scheduler_stack.clock``), never
    at import: under pytest-xdist a module may start many minutes after it was collected."""

    now: datetime
    hours_ahead: int = HOURS_AHEAD

    @classmethod
    def starting_now(cls) -> SlotClock:
        return cls(datetime.now(UTC))

    @property
    def next_slot(self) -> datetime:
        """The module's next daily slot: the first full hour at least :data:`SLOT_MARGIN`
        after its start, then ``hours_ahead - 1`` hours on."""
        soon = self.now + SLOT_MARGIN
        hour = soon.replace(minute=0, second=0, microsecond=0)
        if hour < soon:
            hour += timedelta(hours=1)
        return hour + timedelta(hours=self.hours_ahead - 1)

    @property
    def hour(self) -> int:
        """The UTC export hour of the module's daily exports."""
        return self.next_slot.hour

    @property
    def newest(self) -> datetime:
        """The newest due daily slot when the module starts (≥ 24 - hours_ahead h old): the
        one a ``recovery: latest`` DAG written now runs first."""
        return self.next_slot - timedelta(days=1)

    @property
    def now_hour(self) -> datetime:
        """The newest due hourly slot when the module starts."""
        return self.now.replace(minute=0, second=0, microsecond=0)


def grant_connection(config_dir: Path, conn_id: str, use: str, companies: Iterable[str]) -> None:
    """Add ``companies`` and ``use`` to the grant of ``conn_id`` in ``config_dir``'s
    defaults.yaml (``connections:``)."""
    with edited_defaults(config_dir) as data:
        grant = data.setdefault("connections", {}).setdefault(conn_id,
                                                              {"use": [], "companies": []})
        grant["use"] = sorted({*grant["use"], use})
        grant["companies"] = sorted({*grant["companies"], *companies})


@contextmanager
def edited_defaults(config_dir: Path) -> Iterator[dict[str, Any]]:
    """``config_dir``'s defaults.yaml as a dict to change in the block, then written back:
    under a lock and replaced whole, because modules running at once on the shared stack edit
    the same file and every task and parse of the stack reads it."""
    defaults = config_dir / "defaults.yaml"
    with open(config_dir.parent / ".defaults.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = yaml.safe_load(defaults.read_text())
        yield data
        replace_text(defaults, yaml.safe_dump(data, sort_keys=False))


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: the stack's dag-processor, tasks and the other
    modules' commands read the config directory while a module edits it (a dot-name is
    skipped by every config listing)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def report_slot(module: str, clock: SlotClock) -> None:
    """One line per module on whether its next daily slot fell due while it ran (the shifted
    runs, EXPORT_TEST_HOURS_AHEAD=1, count on it; shown with ``-rA``)."""
    ended = datetime.now(UTC)
    due = clock.next_slot
    when = (f"fell due {int((ended - due).total_seconds())} s before the module ended"
            if due <= ended else f"was still {int((due - ended).total_seconds())} s away")
    print(f"\n{module}: started {clock.now:%H:%M:%S}Z, next daily slot {due:%H:%M}Z {when}")


def widget_export(export_id: str, *, export_hour: int, destinations: Iterable[str] = ("box",),
                  company: str = "clearco", **fields: Any) -> dict[str, Any]:
    """A daily UTC calendar-day CSV export of the demo ``widget_metrics`` table with local
    destinations ``outbox/<company>/<export>/<dest>``; ``fields`` override anything."""
    return {
        "id": export_id, "export_hour": export_hour, "interval_hours": 24,
        "window": {"kind": "calendar_day"},
        "query": {"source": "demo_source", "table": "widget_metrics",
                  "columns": ["company_id", "widget_id", "event_time", "value"],
                  "timestamp_column": "event_time", "tenant_column": "company_id",
                  "ingested_column": "ingested_at", "order_by": ["event_time", "widget_id"]},
        "format": "csv", "csv": {"delimiter": ",", "timestamps": "utc"},
        "destinations": [{"id": d, "type": "local", "path": f"outbox/{company}/{export_id}/{d}"}
                         for d in destinations],
        "deadline": "20h", "recovery": "latest", **fields,
    }


def company_file(company: str, widget_exports: list[dict[str, Any]], **company_fields: Any
                 ) -> dict[str, Any]:
    """A company file (timezone UTC, active) with these widget exports and no data exports."""
    return {"company": {"id": company, "name": company.title(), "timezone": "UTC",
                        "owner": f"ops@{company}.example", "status": "active", **company_fields},
            "widget_exports": widget_exports}


def dag_ids(company: str, config: str | dict[str, Any]) -> list[str]:
    """The DAGs a company file makes: its manual export and one per widget export and per
    data export schedule (primary, and secondary where the file has one)."""
    data = yaml.safe_load(config) if isinstance(config, str) else config
    ids = [f"manual_export__{company}"]
    ids += [f"widget_export__{company}__{e['id']}" for e in data.get("widget_exports") or []]
    ids += [f"data_export__{company}__{e['channel']}__{kind}"
            for e in data.get("data_exports") or [] for kind in ("primary", "secondary")
            if kind in e]
    return ids


def _yaml(config: str | dict[str, Any]) -> str:
    return config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)


@dataclass
class SchedulerStack:
    """A running stack with a fixture config; see the module docstring."""

    stack: Stack
    api: Api | None = None
    _env: dict[str, str] = field(default_factory=dict)
    # On the shared stack: the companies of the module this view belongs to. The ledger reads
    # (counts, ledger_runs) see only them; None sees everything (a stack of its own).
    scope: frozenset[str] | None = None
    # The module's slots, read as it started (the scheduler_stack fixture sets it).
    clock: SlotClock | None = None

    def scoped(self, companies: Iterable[str], clock: SlotClock | None = None
               ) -> SchedulerStack:
        """This stack as one module sees it: the same processes, its own companies."""
        return SchedulerStack(self.stack, self.api, self._env, frozenset(companies), clock)

    # -- life cycle -------------------------------------------------------------------------
    @classmethod
    def prepare(cls, root: Path, companies: dict[str, str | dict[str, Any]],
                env: dict[str, str] | None = None, *, stack_class: type[Stack] = Stack
                ) -> SchedulerStack:
        """A project copy in ``root`` whose ``dags/`` holds exactly ``companies`` (id → company
        file) beside ``defaults.yaml`` and the loader check. Not started. ``stack_class``
        ``Cluster`` (tests/system/cluster/stack.py): `make cluster`'s processes instead."""
        stack = stack_class.in_copy(root, **(env or {}))
        dags = stack.root / "dags"
        for path in dags.glob("*.py"):
            if path.name not in KEPT_DAG_FILES:
                path.unlink()
        for path in (dags / "config").glob("*.yaml"):
            if path.name != "defaults.yaml":
                path.unlink()
        harness = cls(stack)
        for company, config in companies.items():
            harness.write_company(company, config, sync_loaders=False)
        harness.sync_loaders()
        return harness

    @classmethod
    def attach(cls, stack: Stack) -> SchedulerStack:
        """A running stack started elsewhere (another pytest worker: tests/system/scheduler/
        shared.py)."""
        harness = cls(stack)
        harness._env = stack.stack_environ()
        harness.api = stack.api()
        return harness

    def start(self) -> SchedulerStack:
        self.stack.start()
        self._env = self.stack.stack_environ()
        self.api = self.stack.api()
        return self

    def stop(self) -> None:
        """Tear the throw-away stack down (see :func:`tests.system.soak.stack.stop_and_sweep`)."""
        stop_and_sweep(self.stack)

    @property
    def root(self) -> Path:
        return self.stack.root

    @property
    def env(self) -> dict[str, str]:
        """The environment ``eval "$(make -s env)"`` gives a shell in the copy."""
        if not self._env:
            self._env = self.stack.stack_environ()
        return self._env

    @property
    def config_dir(self) -> Path:
        return self.root / "dags" / "config"

    @property
    def artifact_root(self) -> Path:
        return Path(self.env["EXPORT_ARTIFACT_ROOT"])

    @property
    def outbox(self) -> Path:
        return self.root / "exports" / "outbox"

    # -- config -----------------------------------------------------------------------------
    def write_company(self, company: str, config: str | dict[str, Any], *,
                      sync_loaders: bool = True) -> Path:
        path = self.config_dir / f"{company}.yaml"
        replace_text(path, _yaml(config))
        if sync_loaders:
            self.sync_loaders()
        self._touch_loader(company)
        return path

    def _touch_loader(self, company: str) -> None:
        """The dag-processor re-parses a file whose mtime is newer than its last parse at
        once, else only every MIN_FILE_PROCESS_INTERVAL: a company's loader is touched when its
        YAML changes (every loader when defaults.yaml does), so the change is live within the
        refresh interval (seconds)."""
        loader = self.root / "dags" / f"company_{company}.py"
        if loader.exists():
            loader.touch()

    def add_sources(self, **sources: dict[str, str]) -> None:
        """Allow ``sources`` (name → {table: tenant column}) in the stack's defaults.yaml."""
        with edited_defaults(self.config_dir) as data:
            for name, tables in sources.items():
                entry = data["sources"].setdefault(name, {"retention_days": 400, "tables": {}})
                entry.setdefault("tables", {}).update(
                    {table: {"tenant_column": column} for table, column in tables.items()})
        self._touch_loaders()

    def grant_connection(self, conn_id: str, use: str, companies: Iterable[str]) -> None:
        """Grant ``companies`` connection ``conn_id`` for ``use`` in the stack's defaults.yaml
        (issue 23: a company file uses only the connections granted to it there)."""
        grant_connection(self.config_dir, conn_id, use, companies)
        self._touch_loaders()

    def _touch_loaders(self) -> None:
        """defaults.yaml changed: every company's DAGs may change with it."""
        for loader in (self.root / "dags").glob("company_*.py"):
            loader.touch()

    def remove_company(self, company: str, *, sync_loaders: bool = False) -> None:
        """Delete ``dags/config/<company>.yaml`` (the loader stays unless ``sync_loaders``)."""
        (self.config_dir / f"{company}.yaml").unlink()
        if sync_loaders:
            self.sync_loaders()
        self._touch_loader(company)

    def withdraw(self, companies: Iterable[str]) -> None:
        """Pause the companies' DAGs and remove their files and loaders: what a module does
        with its companies when it is done with the shared stack, so the next module's ledger
        reads and audits see none of them running."""
        for company in companies:
            for dag_id in self._company_dags(company):
                self.pause(dag_id)
            (self.config_dir / f"{company}.yaml").unlink(missing_ok=True)
        self.sync_loaders()

    def _company_dags(self, company: str) -> list[str]:
        page = self._api().ok("GET", "/api/v2/dags?limit=100&dag_id_pattern="
                                     f"__{company}")["dags"]
        return [d["dag_id"] for d in page if d["dag_id"].endswith(f"__{company}")
                or f"__{company}__" in d["dag_id"]]

    def validate_errors(self) -> list[str]:
        """The error lines of ``exportctl validate dags/config`` (which must exit 1 exactly when
        there is one) about this module's companies: their files and loaders. On the shared
        stack the folder also holds other modules' companies, and one may be wrong on purpose
        at that moment (test_clear_and_retry keeps a removed company's loader, which the loader
        check reports: CI 4 Dec); lines naming another company's file are left out, and a
        line that names no file fails the call."""
        result = self.exportctl("validate", "dags/config", check=False)
        errors = [line for line in result.stdout.splitlines()
                  if line.strip() and not line.startswith(("warning: ", "OK: "))]
        assert result.returncode == (1 if errors else 0), (result.stdout, result.stderr)
        if self.scope is None:
            return errors
        own = []
        for line in errors:
            path = Path(line.split(": ", 1)[0])
            if path.suffix not in (".yaml", ".yml", ".py"):
                raise AssertionError(f"validate printed a line that names no file: {line}")
            if path.stem.removeprefix("company_") in self.scope:
                own.append(line)
        return own

    def sync_loaders(self) -> None:
        """Write the missing loaders and remove the orphans, as ``exportctl loaders dags`` does;
        on the shared stack for this module's companies only: another module may keep an
        orphan loader on purpose at that moment (test_clear_and_retry's removed company, whose
        stand-in DAGs its cleared task must find), and a sweep of the whole folder deleted it
        under that module's feet (CI, 4 Dec: "Dag not found during start up")."""
        if self.scope is None:
            self.exportctl("loaders", "dags")
        else:
            sync_loaders(self.root / "dags", companies=self.scope)

    # -- command lines ------------------------------------------------------------------------
    def run_cli(self, *argv: str, check: bool = True, timeout: float = 180,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Any command in the copy with the stack's environment (``PATH`` has the venv)."""
        result = subprocess.run(list(argv), cwd=self.root, env={**self.env, **(env or {})},
                                capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def airflow(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` against the stack, e.g. ``airflow("tasks", "clear", dag_id, "-y")``."""
        return self.run_cli(str(self.root / ".venv" / "bin" / "airflow"), *args, **kw)

    def exportctl(self, *args: str, check: bool = True, timeout: float = 180,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``exportctl ARGS`` in the copy with the stack's environment (in this process, as a
        subprocess would see it: ``tests/support/cli.py``)."""
        result = run_exportctl(*args, cwd=self.root, env={**self.env, **(env or {})},
                               timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"exportctl {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    # -- REST -------------------------------------------------------------------------------
    def _api(self) -> Api:
        assert self.api is not None, "start() the stack first"
        return self.api

    def wait_for_dags(self, *dag_ids: str, timeout: float = 180) -> None:
        """Until the dag-processor has parsed every DAG in ``dag_ids``."""
        missing = list(dag_ids)

        def parsed() -> bool:
            missing[:] = [d for d in dag_ids
                          if self._api().call("GET", f"/api/v2/dags/{d}")[0] != 200]
            return not missing

        wait_until(parsed, timeout, 1, lambda: f"DAGs {missing} to be parsed; "
                                               f"import errors: {self.import_errors()}")

    def import_errors(self) -> dict[str, str]:
        """The DAG files Airflow could not import (file name → the error's last line)."""
        page = self._api().ok("GET", "/api/v2/importErrors?limit=100")
        return {Path(e["filename"]).name: e["stack_trace"].strip().splitlines()[-1][:500]
                for e in page["import_errors"]}

    def pause(self, dag_id: str, paused: bool = True) -> None:
        self._api().ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, logical_date: datetime | None = None,
                conf: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        body: dict[str, Any] = {"logical_date": logical_date.isoformat() if logical_date else None,
                                "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self._api().ok("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"]

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self._api().ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=id"
                              )["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self._api().ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
                                     "?limit=100")["task_instances"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``{"render": "success", "deliver[0]": "failed", …}``."""
        return {_label(ti): ti["state"] for ti in self.task_instances(dag_id, run_id)}

    def task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
                      ) -> dict[str, Any]:
        suffix = f"/{map_index}" if map_index >= 0 else ""
        return self._api().ok("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                                     f"{task_id}{suffix}")

    def clear(self, dag_id: str, run_id: str, tasks: Iterable[str | tuple[str, int]], *,
              downstream: bool = False, upstream: bool = False, only_failed: bool = False
              ) -> list[str]:
        """Clear tasks of one run as the UI's Clear does (``reset_dag_runs``); a task is an id
        (every map index) or ``(id, map_index)``. Returns the cleared ``task[index]`` labels."""
        body = {"dry_run": False, "dag_run_id": run_id,
                "task_ids": [list(t) if isinstance(t, tuple) else t for t in tasks],
                "only_failed": only_failed, "include_downstream": downstream,
                "include_upstream": upstream, "reset_dag_runs": True}
        cleared = self._api().ok("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)
        return sorted(_label(ti) for ti in cleared["task_instances"])

    def mark(self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int = -1
             ) -> None:
        """Set a task instance's state as the UI's "Mark as" does."""
        suffix = f"/{map_index}" if map_index >= 0 else ""
        self._api().ok("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                                f"{task_id}{suffix}", {"new_state": state})

    # -- waiting ------------------------------------------------------------------------------
    def wait_for_run_id(self, dag_id: str, timeout: float = 120) -> str:
        """The id of the DAG's first run, once there is one."""
        first: list[str] = []

        def created() -> bool:
            page = self._api().ok("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1&order_by=id")
            first[:] = [r["dag_run_id"] for r in page["dag_runs"]]
            return bool(first)

        wait_until(created, timeout, 1, lambda: f"a run of {dag_id}")
        return first[0]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any] | None:
        """One run, or None while it does not exist: what a wait polls instead of the DAG's
        whole list of runs (listing 100 runs every second was the api-server's costliest
        request in make test, ~35 % of its request time on a shared stack)."""
        status, payload = self._api().call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        if status == 404:
            return None
        if status != 200:
            raise AssertionError(f"GET run {dag_id} {run_id} -> HTTP {status}: {payload}")
        return payload

    def wait_for_run(self, dag_id: str, run_id: str | None = None, *, state: str = "success",
                     timeout: float = 180) -> dict[str, Any]:
        """Until the run (the DAG's first if ``run_id`` is None) is finished; fails unless it
        ended in ``state``, naming every task's state and the log tail of unsuccessful ones."""
        found: dict[str, Any] = {}

        def finished() -> bool:
            if run_id is None:
                runs = self.dag_runs(dag_id)
                run = runs[0] if runs else None
            else:
                run = self.dag_run(dag_id, run_id)
            found.update(run or {})
            return bool(run) and run["state"] in ("success", "failed")

        def progress() -> object:
            """The run's tasks' states and tries: while they move, a loaded machine is slow,
            not stuck (CI, 4 Dec: alertco's 4th render attempt failed at 240 s of a wait)."""
            if not found.get("dag_run_id"):
                return None
            return sorted((_label(ti), ti["state"] or "", ti.get("try_number") or 0)
                          for ti in self.task_instances(dag_id, found["dag_run_id"]))

        wait_until(finished, timeout, 1,
                   lambda: self._describe(dag_id, found.get("dag_run_id"), f"run to reach {state}"),
                   progress=progress)
        if found["state"] != state:
            raise AssertionError(self._describe(dag_id, found["dag_run_id"],
                                                f"run to end {state}, it ended {found['state']}"))
        return found

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, *,
                      states: Iterable[str] = ("success",), timeout: float = 120,
                      interval: float = 1) -> dict[str, Any]:
        """Until the task instance is in one of ``states``; a finished task in another state
        fails at once (with the log tail), as does the timeout."""
        wanted = tuple(states)
        found: dict[str, Any] = {}

        def reached() -> bool:
            found.update(self.task_instance(dag_id, run_id, task_id, map_index))
            if found["state"] in wanted:
                return True
            if found["state"] in DONE:
                raise AssertionError(self._describe(
                    dag_id, run_id, f"{task_id} to reach {wanted}; it is {found['state']}"))
            return False

        wait_until(reached, timeout, interval,
                   lambda: self._describe(dag_id, run_id, f"{task_id} to reach {wanted}"))
        return found

    def wait_for_clear(self, dag_id: str, run_id: str, *, timeout: float = 180) -> None:
        """After :meth:`clear` (or a trigger): until the run is finished again; fails unless
        every task of it ended success, with the states and the log tails."""

        def done() -> bool:
            run = self.dag_run(dag_id, run_id)
            assert run is not None, f"{dag_id} has no run {run_id}"
            return run["state"] in ("success", "failed")

        wait_until(done, timeout, 1, lambda: self._describe(dag_id, run_id, "the run to finish"))
        states = self.task_states(dag_id, run_id)
        bad = {lbl: s for lbl, s in states.items() if s != "success"}
        if bad:
            raise AssertionError(self._describe(dag_id, run_id,
                                                f"every task to succeed; not successful: {bad}"))

    # -- diagnosis ------------------------------------------------------------------------------
    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1,
                 lines: int = 25) -> str:
        """The last ``lines`` events of the task's newest try, from the log files."""
        base = Path(self.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" \
            / f"task_id={task_id}"
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        tries = sorted(base.glob("attempt=*.log"), key=lambda p: p.stat().st_mtime)
        if not tries:
            return f"(no log under {base})"
        out = []
        for raw in tries[-1].read_text(errors="replace").splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                out.append(raw)
                continue
            text = f"{entry.get('level', '')} {entry.get('event', '')}"
            for exc in entry.get("error_detail") or []:
                text += f"\n    {exc.get('exc_type')}: {exc.get('exc_value')}"
            out.append(text)
        return f"--- {tries[-1].name} of {task_id}" + (f"[{map_index}]" if map_index >= 0 else "") \
            + " ---\n" + "\n".join(out[-lines:])

    def _describe(self, dag_id: str, run_id: str | None, what: str) -> str:
        if run_id is None:
            return f"{dag_id}: waiting for {what}; no run yet"
        try:
            tis = self.task_instances(dag_id, run_id)
        except AssertionError as exc:
            return f"{dag_id}/{run_id}: waiting for {what}; task instances unreadable: {exc}"
        states = ", ".join(f"{_label(ti)}={ti['state']}" for ti in tis)
        logs = [self.task_log(dag_id, run_id, ti["task_id"], ti["map_index"])
                for ti in tis if ti["state"] not in ("success", None, "scheduled", "queued")]
        return f"{dag_id}/{run_id}: waiting for {what}\ntasks: {states}\n" + "\n".join(logs)

    # -- the ledger -----------------------------------------------------------------------------
    def ledger(self):
        from export_lib.ledger import open_ledger

        return open_ledger(self.env["EXPORT_LEDGER_URL"])

    def counts(self, slot: datetime | None = None) -> dict[str, int]:
        """Rows of the ledger (runs, attempts, artifacts, deliveries, delivery attempts) and the
        staging objects left in the artifact store: of the view's companies on a shared stack,
        of the runs of ``slot`` only if given (a later slot may fall due mid-test)."""
        import sqlalchemy as sa

        scope = sorted(self.scope) if self.scope is not None else None
        where = ([] if scope is None else ["r.company = ANY(:scope)"]) + (
            [] if slot is None else ["r.slot = :slot"])
        mine = f" WHERE {' AND '.join(where)}" if where else ""
        queries = {
            "runs": f"SELECT count(*) FROM export_runs r{mine}",
            "attempts": f"SELECT count(*) FROM export_attempts a JOIN export_runs r ON "
                        f"a.run_id = r.id{mine}",
            "artifacts": f"SELECT count(*) FROM export_artifacts a JOIN export_runs r ON "
                         f"a.run_id = r.id{mine}",
            "deliveries": f"SELECT count(*) FROM deliveries d JOIN export_runs r ON "
                          f"d.run_key = r.run_key{mine}",
            "delivery_attempts": f"SELECT count(*) FROM delivery_attempts x JOIN deliveries d "
                                 f"ON x.delivery_id = d.delivery_id JOIN export_runs r ON "
                                 f"d.run_key = r.run_key{mine}",
        }
        ledger = self.ledger()
        try:
            with ledger.engine.connect() as conn:
                params = {**({} if scope is None else {"scope": scope}),
                          **({} if slot is None else {"slot": slot})}
                out = {name: conn.execute(sa.text(sql), params).scalar_one()
                       for name, sql in queries.items()}
                attempt_ids = set(conn.execute(sa.text(
                    f"SELECT a.attempt_id FROM export_attempts a JOIN export_runs r ON "
                    f"a.run_id = r.id{mine}"), params).scalars())
        finally:
            ledger.engine.dispose()
        staging = self.artifact_root / ".staging"
        left = [p for p in staging.iterdir()] if staging.exists() else []
        out["staging_objects"] = len([p for p in left if scope is None
                                      or p.name.split(".", 1)[0] in attempt_ids])
        return out

    def ledger_runs(self) -> list[dict[str, Any]]:
        """``exportctl runs --json`` (read in this process): of the view's companies on a
        shared stack."""
        url = self.env["EXPORT_LEDGER_URL"]
        if self.scope is None:
            return ledger_runs_at(url)
        return [run for company in sorted(self.scope) for run in ledger_runs_at(url, company)]


def _label(ti: dict[str, Any]) -> str:
    return ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else "")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float,
               describe: Callable[[], str], *, progress: Callable[[], object] | None = None,
               extensions: int = 2) -> None:
    """Until ``predicate()``; fails after ``timeout`` s. With ``progress``, read at the start
    and at each deadline: a deadline at which it changed since the last reading is moved on by
    ``timeout`` (at most ``extensions`` times), so only a wait that stopped moving fails early."""
    start = time.monotonic()
    deadline, extended = start + timeout, 0
    if predicate():
        return
    seen = progress() if progress is not None else None  # after the predicate: it may set state
    while not predicate():
        if time.monotonic() > deadline:
            now = progress() if progress is not None else seen
            if now == seen or extended >= extensions:
                stalled = (" (no progress since the last check)"
                           if progress is not None and now == seen else "")
                raise AssertionError(f"timed out after {time.monotonic() - start:.0f} s"
                                     f"{stalled}: " + describe())
            seen, extended, deadline = now, extended + 1, deadline + timeout
        time.sleep(interval)


def keep_or_remove(root: Path, *, failed: bool = False) -> None:
    """Delete a stack's scratch directory unless ``SCHEDULER_KEEP`` is set or a test using it
    ``failed`` (kept for a post-mortem)."""
    if os.environ.get("SCHEDULER_KEEP") or failed:
        why = "a test failed" if failed else "SCHEDULER_KEEP"
        print(f"{why}: the stack's copy stays in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
