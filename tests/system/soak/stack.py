"""A `make run` stack in a copy of the project, on free ports, driven like a person would.

The copy (Makefile, scripts, dags, plugins, deploy, packaging files; ``.venv`` a symlink to the
project's) gets its own ``.airflow`` state and ``exports``, so it never collides with a
developer's running ``make run``. Its databases: in a test session, its own ``s<hex>_airflow``,
``…_exports`` and ``…_demo`` on the session's PostgreSQL (``make run PG_SERVER=…
PG_DB_PREFIX=…``), cloned from templates migrated once per session (:func:`session_templates`;
no ``initdb``, no migration per stack), dropped by :func:`stop_and_sweep`; outside a session
(bench/) or with ``local_pg=True``, a PostgreSQL cluster of its own in ``.airflow/pg``.
Everything talks to the stack through its own interfaces: ``make run|stop|status|env``, the
REST API and ``exportctl runs --json`` (its library calls, in this process: :func:`ledger_runs_at`).
Used by the soak tests and by ``bench/acceptance_run.py``. Over 400 lines on purpose: the
copy, its databases (templates included) and its teardown belong together; every system stack
(soak, cluster, shared) is built from them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pwd
import random
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.services.ports import free_port
from tests.services.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[3]
COPIED = ("Makefile", "scripts", "dags", "plugins", "deploy", "setup.cfg", "pyproject.toml",
          "requirements.txt", "requirements-dev.txt", "requirements")
EXPORT_DAG_PREFIXES = ("widget_export__", "data_export__", "manual_export")
BATCH_DAG_PREFIX = "recovery_batch__"
# Variables of a developer's shell that must not leak into the copy's stack.
SCRUBBED_PREFIXES = ("AIRFLOW", "EXPORT_", "PG", "MAKE")
SCRUBBED = {"PORT", "DB", "MFLAGS"}


def scrubbed_environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(SCRUBBED_PREFIXES) and k not in SCRUBBED}
    env.update(extra)
    return env


def copy_project(dest: Path) -> Path:
    """A runnable copy of the project in ``dest``; its parents must be searchable by the
    ``postgres`` user (use :func:`scratch_dir`, not pytest's 0700 ``tmp_path``)."""
    dest.mkdir(parents=True, exist_ok=True)
    os.chmod(dest, 0o755)  # PostgreSQL runs as `postgres` when we are root: dest/.airflow/pg
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore, copy_function=shutil.copy2)
        else:
            shutil.copy2(src, dest / name)  # keeps mtimes: make sees the venv up to date
    (dest / ".venv").symlink_to(REPO / ".venv")
    # The copy shares the project's venv: its packaging files must not look newer than the
    # install, or the copy's `make` would reinstall (and re-point the editable install to it).
    installed = (REPO / ".venv" / ".installed").stat().st_mtime
    for name in ("requirements.txt", "requirements-dev.txt", "setup.cfg", "pyproject.toml"):
        os.utime(dest / name, (installed - 1, installed - 1))
    return dest


# The databases of a stack (scripts/pg.sh PG_DATABASES), each ``<prefix><name>``.
DATABASES = ("airflow", "exports", "demo")
# The session's PostgreSQL server the stacks share (tests/system/conftest.py registers the
# ``postgres_server`` fixture's); None: every stack initialises a cluster of its own.
_session_pg: PostgresServer | None = None
_session_templates: dict[int, str] = {}  # server port -> template prefix, made once


def use_session_postgres(server: PostgresServer | None) -> None:
    """Let :meth:`Stack.in_copy` put its stacks' databases on ``server`` (None: stop that)."""
    global _session_pg
    _session_pg = server


def _server_url(server: PostgresServer) -> str:
    return f"postgresql://{server.user}:{server.password}@127.0.0.1:{server.port}"


def session_templates() -> str:
    """The prefix of the template databases on the session's server (``tmpl_airflow``
    migrated with ``airflow db migrate`` and the pools of deploy/pools.json, ``…_exports`` with
    ``exportctl ledger upgrade``, ``…_demo`` empty), made once per server: a stack's
    ``make run PG_TEMPLATE_PREFIX=…`` clones them, so its migrations find nothing to do.

    Made by the project's own scripts in a throw-away copy; under an advisory lock (one maker
    per server); marked ``IS_TEMPLATE`` and closed to connections once complete, because
    ``CREATE DATABASE … TEMPLATE`` fails while anyone is connected to the template."""
    import psycopg

    server = _session_pg
    assert server is not None, "no session PostgreSQL (use_session_postgres)"
    if server.port in _session_templates:
        return _session_templates[server.port]
    prefix = "tmpl_"  # one set per server: every xdist worker's stacks clone the same
    names = [prefix + db for db in DATABASES]
    with psycopg.connect(_server_url(server) + "/postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (prefix,))
        done = conn.execute("SELECT count(*) FROM pg_database WHERE datistemplate "
                            "AND datname = ANY(%s)", (names,)).fetchone()[0]
        if done != len(names):
            leftovers = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)",
                                     (names,)).fetchall()
            for (name,) in leftovers:  # of an interrupted earlier attempt
                conn.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE false')
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            _migrate_templates(server, prefix)
            for name in names:
                conn.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE true ALLOW_CONNECTIONS false')
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (prefix,))
    _session_templates[server.port] = prefix
    return prefix


def _migrate_templates(server: PostgresServer, prefix: str) -> None:
    scratch = scratch_dir("export-templates-")
    try:
        root = copy_project(scratch / "project")
        (root / ".airflow").mkdir()
        script = ('source scripts/airflow-env.sh && source scripts/pg.sh && pg_create_databases'
                  ' && airflow db migrate >.airflow/db-migrate.log 2>&1'
                  ' && airflow pools import deploy/pools.json >/dev/null'
                  # the stamp that lets a copy skip both (scripts/pg.sh, pg_airflow_stamp)
                  ' && pg_psql_admin -c "COMMENT ON DATABASE \\"${PG_DB_PREFIX}airflow\\"'
                  ' IS \'$(pg_airflow_stamp)\'" >/dev/null'
                  ' && exportctl ledger upgrade')
        result = subprocess.run(
            ["bash", "-c", script], cwd=root, capture_output=True, text=True, timeout=900,
            env=scrubbed_environ(PG_SERVER=_server_url(server), PG_DB_PREFIX=prefix))
        if result.returncode != 0:
            log = root / ".airflow" / "db-migrate.log"
            raise AssertionError(f"the template databases ({prefix}*) failed:\n{result.stdout}"
                                 f"\n{result.stderr}\n{log.read_text()[-3000:] if log.exists() else ''}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ledger_runs_at(url: str, company: str | None = None) -> list[dict]:
    """``exportctl runs --json [--company C]``'s output, computed here with the same library
    calls: a subprocess costs ~0.75 s of CPU (an interpreter and its imports) and the system
    tests read the ledger in their wait loops, on a machine that is short of CPU."""
    from datetime import UTC, datetime

    from export_lib.ledger import open_ledger
    from export_lib.views.reports import run_filter, runs_page

    ledger = open_ledger(url)
    try:
        page = runs_page(ledger.engine, run_filter(company=company, limit=500),
                         now=datetime.now(UTC))
        return json.loads(json.dumps(list(page.runs)))
    finally:
        ledger.engine.dispose()


def relocated_dir(airflow_home: Path) -> Path:
    """Where scripts/pg.sh (pg_relocated_dir) puts the cluster of ``airflow_home`` when the
    ``postgres`` user cannot reach it."""
    key = hashlib.sha1(str(airflow_home).encode()).hexdigest()[:12]
    return Path(pwd.getpwnam("postgres").pw_dir) / "airflow-scheduled-exports" / key


def scratch_dir(prefix: str) -> Path:
    """A fresh directory under the system temp dir, searchable by the ``postgres`` user."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Api:
    """The REST API with a JWT from /auth/token; records every call's latency."""

    base: str
    latencies: list[float] = field(default_factory=list)
    token: str | None = None

    # A ceiling, not a wait: on a loaded 2-core machine (four stacks up, load average 12) the
    # api-server answered a plain GET after more than 30 s (CI, 2 Dec).
    def call(self, method: str, path: str, body: Any = None, timeout: float = 120
             ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, payload = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        finally:
            self.latencies.append(time.monotonic() - started)
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = self.call(method, path, body)
        for _ in range(2):
            # What an operator does with "Database error" (a deadlock between the api-server's
            # transaction and the scheduler's, rolled back: CI, 2 Dec, on clearTaskInstances).
            if status != 500 or "Database error" not in str(payload):
                break
            time.sleep(2)
            status, payload = self.call(method, path, body)
        if status not in (200, 201):
            raise AssertionError(f"{method} {path} -> HTTP {status}: {payload}")
        return payload

    def login(self, user: str = "admin", password: str = "admin") -> Api:
        """Sign in as ``user`` (the stack's admin by default): its token for every later call."""
        self.token = None
        self.token = self.ok("POST", "/auth/token",
                             {"username": user, "password": password})["access_token"]
        return self

    def dag_runs(self, *states: str) -> list[dict]:
        """Every DAG run (optionally in ``states``) across DAGs, all pages."""
        runs: list[dict] = []
        query = "".join(f"&state={s}" for s in states)
        while True:
            page = self.ok("GET", f"/api/v2/dags/~/dagRuns?limit=100&offset={len(runs)}"
                                  f"&order_by=id{query}")
            runs.extend(page["dag_runs"])
            if not page["dag_runs"] or len(runs) >= page["total_entries"]:
                return runs

    def active_runs(self) -> int:
        page = self.ok("GET", "/api/v2/dags/~/dagRuns?limit=1&state=queued&state=running")
        return page["total_entries"]

    def trigger_manual(self, company: str, base_export: str, day: datetime, reason: str) -> dict:
        start = day.replace(hour=0, minute=0, second=0, microsecond=0)
        conf = {"company": company, "base_export": base_export,
                "window_start": start.isoformat(), "window_end": (start + timedelta(days=1)).isoformat(),
                "columns": [], "format": "csv", "destinations": [], "reason": reason,
                "regenerate": False}
        return self.ok("POST", f"/api/v2/dags/manual_export__{company}/dagRuns",
                       {"logical_date": None, "conf": conf})

    def clear_random_task(self, rng: random.Random) -> tuple[str, str, str] | None:
        """Clear one random finished task (and its downstream) of an export run that has
        finished: clearing resolve_window while its render was already dispatched deletes the
        summary that render then reads (CI, 3 Dec: the render failed for good) — an operator
        clears a finished run, not a task whose downstream is starting."""
        finished = {(r["dag_id"], r["dag_run_id"]) for r in self.dag_runs("success")}
        page = self.ok("GET", "/api/v2/dags/~/dagRuns/~/taskInstances?state=success&limit=100"
                              "&order_by=-end_date")
        tis = [ti for ti in page["task_instances"]
               if ti["dag_id"].startswith(EXPORT_DAG_PREFIXES) and ti["map_index"] == -1
               and (ti["dag_id"], ti["dag_run_id"]) in finished]
        if not tis:
            return None
        ti = rng.choice(tis)
        self.ok("POST", f"/api/v2/dags/{ti['dag_id']}/clearTaskInstances",
                {"dry_run": False, "dag_run_id": ti["dag_run_id"], "task_ids": [ti["task_id"]],
                 "only_failed": False, "include_downstream": True, "reset_dag_runs": True})
        return ti["dag_id"], ti["dag_run_id"], ti["task_id"]


@dataclass
class Stack:
    root: Path
    port: int | None  # None: whatever `make run` chooses (remembered, else the default)
    pgport: int | None  # the local cluster's, or the PG_SERVER's port
    extra_env: dict[str, str] = field(default_factory=dict)
    # make run PG_SERVER=… (None: the local cluster in .airflow/pg), its PG_DB_PREFIX and the
    # PG_TEMPLATE_PREFIX its missing databases are cloned from.
    pg_server: str | None = None
    db_prefix: str = ""
    template_prefix: str = ""

    @classmethod
    def in_copy(cls, dest: Path, *, local_pg: bool = False, **extra_env: str) -> Stack:
        """A copy of the project in ``dest``, not started. Its databases live on the session's
        PostgreSQL (see the module docstring) unless ``local_pg`` (a test of the local
        cluster itself: its port, its data directory, `make stop` stopping it) or there is no
        session server."""
        return cls(copy_project(dest), free_port(), extra_env=dict(extra_env),
                   **cls.database_choice(local_pg))

    @staticmethod
    def database_choice(local_pg: bool) -> dict[str, Any]:
        """The ``pgport`` / ``pg_server`` / ``db_prefix`` / ``template_prefix`` of a new stack."""
        if local_pg or _session_pg is None:
            return {"pgport": free_port()}
        return {"pgport": _session_pg.port, "pg_server": _server_url(_session_pg),
                "db_prefix": f"s{uuid.uuid4().hex[:10]}_",
                "template_prefix": session_templates()}

    def database_url(self, name: str) -> str:
        """A libpq URL of the stack's database ``name`` (airflow, exports, demo)."""
        server = self.pg_server or f"postgresql://exports:exports@127.0.0.1:{self.pgport}"
        return f"{server}/{self.db_prefix}{name}"

    def drop_databases(self) -> None:
        """On a PG_SERVER: drop the stack's databases, whoever is still connected."""
        if not self.pg_server:
            return
        import psycopg

        with psycopg.connect(self.pg_server + "/postgres", autocommit=True) as conn:
            for db in DATABASES:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.db_prefix}{db}" WITH (FORCE)')

    @property
    def run_dir(self) -> Path:
        return self.root / ".airflow" / "run"

    def environ(self) -> dict[str, str]:
        ports = {k: str(v) for k, v in (("PORT", self.port), ("PGPORT", self.pgport)) if v}
        if self.pg_server:
            ports.update(PG_SERVER=self.pg_server, PG_DB_PREFIX=self.db_prefix,
                         PG_TEMPLATE_PREFIX=self.template_prefix)
        return scrubbed_environ(**ports, **self.extra_env)

    def remembered(self) -> dict[str, str]:
        """DB / PORT / PGPORT as the last setup remembered them (.airflow/run.env)."""
        text = (self.root / ".airflow" / "run.env").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def make(self, *targets: str, timeout: float = 600, **overrides: str
             ) -> subprocess.CompletedProcess:
        env = {**self.environ(), **overrides}
        return subprocess.run(["make", "-C", str(self.root), "--no-print-directory", *targets],
                              env=env, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> None:
        result = self.make("run")
        if result.returncode != 0:
            raise AssertionError(f"make run failed ({result.returncode}):\n{result.stdout[-3000:]}"
                                 f"\n{result.stderr[-3000:]}")

    def stop(self) -> subprocess.CompletedProcess:
        return self.make("stop", timeout=180)

    def status(self) -> dict:
        return json.loads((self.run_dir / "status.json").read_text())

    def stack_environ(self) -> dict[str, str]:
        """The environment ``eval "$(make -s env)"`` gives a shell in the copy (read once: it
        follows from the stack's remembered choices, which do not change while it lives)."""
        cached = self.__dict__.get("_stack_environ")
        if cached is None:
            out = subprocess.run(
                ["bash", "-c", 'eval "$(make -s --no-print-directory env)" && env -0'],
                cwd=self.root, env=self.environ(), capture_output=True, check=True)
            cached = dict(item.split("=", 1) for item in out.stdout.decode().split("\0")
                          if "=" in item)
            self.__dict__["_stack_environ"] = cached
        return dict(cached)

    def ledger_runs(self) -> list[dict]:
        """What ``exportctl runs --json`` prints, read in this process (the tests poll it)."""
        return ledger_runs_at(self.stack_environ()["EXPORT_LEDGER_URL"])

    def api(self) -> Api:
        """A logged-in API client, once the dag-processor has parsed DAGs: acme's manual export
        when the copy has company acme, else any DAG (a copy may drop the demo companies)."""
        api = Api(f"http://127.0.0.1:{self.port or self.remembered()['PORT']}")
        api.login()

        def parsed() -> bool:
            if (self.root / "dags" / "company_acme.py").exists():
                return api.call("GET", "/api/v2/dags/manual_export__acme")[0] == 200
            status, page = api.call("GET", "/api/v2/dags?limit=1")
            if status == 200 and page["total_entries"] > 0:
                return True
            # A copy without DAGs (the shared scheduler stack before its modules write their
            # companies): the dag-processor and the scheduler are up and beating.
            status, health = api.call("GET", "/api/v2/monitor/health")
            return status == 200 and all(
                (health.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "dag_processor"))

        wait_for(parsed, 120,
                 interval=1, what="the DAGs to be parsed")
        return api

    def processes(self) -> list[int]:
        """Pids still belonging to this stack (what `make stop` must end), as the stack's own
        ``scripts/supervise.py leftovers`` finds them."""
        out = subprocess.run([str(self.root / ".venv" / "bin" / "python"), "scripts/supervise.py",
                              "leftovers"], cwd=self.root, capture_output=True, text=True,
                             check=True, env={**self.environ(), "ROOT": str(self.root),
                                              "AIRFLOW_HOME": str(self.root / ".airflow")})
        return [int(p) for p in out.stdout.split()]

    def postgres_running(self) -> bool:
        pid_file = self.root / ".airflow" / "pg" / "postmaster.pid"
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            return False
        return True


def stop_and_sweep(stack: Stack) -> None:
    """Tear a throw-away stack down in ~2 s: SIGKILL its supervisor (or it would restart what
    dies) and its Airflow processes, then `make stop` stops PostgreSQL and sweeps; SIGKILL
    whatever is left; drop its databases on the session's server. `make stop`'s orderly
    shutdown (~25 s) is asserted by the soak test that calls it, not paid by every fixture."""
    try:
        supervisor = stack.run_dir / "supervisor.pid"
        if supervisor.is_file():
            _kill(int(supervisor.read_text().split()[0] or 0))
        for pid in stack.processes():
            if "postgres" not in _cmdline(pid):
                _kill(pid)
    except (OSError, ValueError, subprocess.CalledProcessError):
        pass  # `make stop` below still ends everything, only slower
    try:
        stack.stop()
    finally:
        try:
            for pid in stack.processes():
                _kill(pid)
        finally:
            stack.drop_databases()


def _kill(pid: int) -> None:
    if pid <= 0:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait_for(predicate, timeout: float, interval: float = 2.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def check_ledger(runs: list[dict], airflow_runs: list[dict]) -> dict[str, int]:
    """The ledger's exact counts against Airflow's: one artifact per period, one acknowledged
    delivery per destination, one ledger run per successful export DAG run. Returns counts."""
    exported = [r for r in runs if r["state"] != "skipped"]
    problems = []
    for r in exported:
        if r["state"] != "ready" or [a["version"] for a in r["artifacts"]] != [1]:
            problems.append(f"{r['run_key']}: state {r['state']}, artifacts "
                            f"{[a['version'] for a in r['artifacts']]}")
        dests = [d["destination"] for d in r["deliveries"]]
        if not dests or len(dests) != len(set(dests)):
            problems.append(f"{r['run_key']}: deliveries to {dests}")
        for d in r["deliveries"]:
            if d["state"] != "acknowledged" or d["version"] != 1:
                problems.append(f"{r['run_key']}: delivery {d['destination']} {d['state']} "
                                f"v{d['version']}")
    keys = [r["run_key"] for r in runs]
    if len(keys) != len(set(keys)):  # one run per slot (a run key names schedule and slot)
        problems.append("duplicate run keys")
    # A period of a long catch-up is exported by a recovery batch (ADR 0032), not by a DAG run
    # of its own: it names the batch's task, whose DAG run must be one Airflow ran to success.
    batched = [r for r in exported if r.get("batch")]
    export_runs = [r for r in airflow_runs if r["dag_id"].startswith(EXPORT_DAG_PREFIXES)]
    if len(export_runs) != len(exported) - len(batched):
        problems.append(f"{len(export_runs)} export DAG runs in Airflow but "
                        f"{len(exported) - len(batched)} exported runs in the ledger not "
                        f"exported by a batch ({len(batched)} were)")
    batch_runs = {(r["dag_id"], r["dag_run_id"]): r["state"] for r in airflow_runs
                  if r["dag_id"].startswith(BATCH_DAG_PREFIX)}
    for r in batched:
        dag_id, run_id = r["batch"].split("/")[:2]
        if batch_runs.get((dag_id, run_id)) != "success":
            problems.append(f"{r['run_key']}: exported by batch {r['batch']}, whose DAG run is "
                            f"{batch_runs.get((dag_id, run_id), 'not in Airflow')}")
    assert not problems, "ledger counts are off:\n" + "\n".join(problems[:40])
    return {"ledger_runs": len(runs), "exported": len(exported), "batched": len(batched),
            "artifacts": sum(len(r["artifacts"]) for r in exported),
            "deliveries": sum(len(r["deliveries"]) for r in exported)}


def now_utc() -> datetime:
    return datetime.now(UTC)
