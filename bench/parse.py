"""Benchmark DAG parsing: the dag-processor's full parse and a worker's single-DAG parse.

Run from the repository root::

    python bench/parse.py --companies 500 --json

Generates ``--companies`` companies into a temporary ``dags/`` folder: ``config/defaults.yaml``
and any shipped DAG file other than the company loaders (e.g. ``demo_feed.py``) copied
from ``dags/``; one ``config/<id>.yaml`` per company with 2 widget exports and 3 data
channels (each a primary and a secondary export: 8 export DAGs per company, plus the company's
``manual_export__<id>``); and one loader
``company_<id>.py`` per company, made from a shipped loader with the company id replaced (the
same text as ``dags/company_*.py``). Each figure is measured in a fresh subprocess with its own
``AIRFLOW_HOME`` (no database or network is touched), ``--repeat`` times (default 3,
interleaved); the minimum of each figure is kept, the usual estimate of the undisturbed cost:

* ``import_seconds``: from the subprocess's first statement to having imported Airflow
  (``airflow``, ``airflow.sdk``, the DagBag module) and our plugin and DAG factory modules; the
  fixed cost every parse pays before reading a single config file (interpreter start excluded).
* ``parse_seconds``: the same imports **plus** ``DagBag(dag_folder=<tmp dags>)`` over every
  loader, as the dag-processor does (asserting zero import errors and the expected DAG count).
  Both are read in the same subprocess, the first on the way to the second.
* ``dags``: how many DAGs that parse produced: ``9 × companies`` (8 exports and the manual
  DAG) plus those of any other shipped DAG file copied along (e.g. ``dags/demo_feed.py``).
* ``ms_per_dag``: ``(parse_seconds - import_seconds) / dags * 1000`` of one subprocess, the
  per-DAG cost (the smallest over the repeats, like every figure; from two subprocesses'
  figures, the noise of two imports can make it negative at a few companies).
* ``plugin_import_seconds``: the part of ``import_seconds`` spent importing our plugin and DAG
  factory once Airflow is imported. The dag-processor pre-imports only a file's ``airflow.*``
  imports in its parent before forking the child that parses the file, so every file's child
  pays this again.
* ``serialize_seconds``: after that parse, ``DagSerialization.to_dict`` of every DAG (what the
  dag-processor's child does before handing the DAGs to its parent for the database), with the
  plugins loaded first, as the dag-processor has them before it forks (a process's first
  serialisation of a custom timetable loads every plugin, ~0.9 s once); ``serialize_ms_per_dag``
  is that per DAG.
* ``child_plugin_import_seconds``, ``child_serialize_seconds``, ``child_file_seconds``: in a
  real parse child: a process that did what the dag-processor does before it forks (our
  ``export_airflow.deploy.preload``, installed by the ``airflow.policy`` entry point) forks; the
  child imports the plugin and the factory, parses one company's loader (``BundleDagBag``) and
  serialises its 10 DAGs. The import figure is what a parse child pays for our plugin.
* ``worker_parse_seconds``: how Airflow's task runner parses for one task instance
  (``airflow.sdk.execution_time.task_runner.parse``): with ``_AIRFLOW_PARSING_CONTEXT_DAG_ID`` /
  ``_AIRFLOW_PARSING_CONTEXT_TASK_ID`` set (what ``airflow.sdk.get_parsing_context()`` reads),
  ``BundleDagBag(dag_folder=<one company's loader file>, safe_mode=False,
  load_op_links=False)``; the imports above are done first and **excluded**; the figure is the
  DagBag call alone (asserting the DAG and its task were found).

``--dag-processor`` instead runs Airflow's own ``airflow dag-processor -n 1`` over the folder,
end to end (fork per file, parse, serialise, the parent's database writes; SQLite metadata
database made by ``airflow db migrate`` or copied from ``--metadata-db``), twice: the first
pass writes every DAG, the second is the steady state (every file parsed again, nothing
changed); each pass's wall and CPU seconds (the dag-processor and all its children), and the
steady pass spread over ``min_file_process_interval=600`` (docs/explanation/scale.md) as cores.

Times are wall-clock seconds; ``--clock cpu`` measures the subprocess's CPU time instead
(steadier on a busy shared machine, for comparing two versions of the code). Prints one JSON
object with ``--json``, a short table otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(Path(__file__).resolve().parent))  # bench/results.py, when imported
SHIPPED_DAGS = ROOT / "dags"
TEMPLATE_COMPANY = "acme"  # the shipped loader used as the template for generated ones
CHANNELS = ("search", "social", "display")
DAGS_PER_COMPANY = 2 + 2 * len(CHANNELS)
TIMEZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo", "Pacific/Auckland", "UTC")

COMPANY_YAML = """\
company:
  id: {cid}
  name: Company {n}
  timezone: {tz}
  owner: data@{cid}.example
  authorized: [analytics@{cid}.example]

widget_exports:
  - id: daily-spend
    export_hour: {hour}
    window: {{kind: calendar_day}}
    query: &widget_query
      source: demo_source
      table: widget_metrics
      columns: [company_id, widget_id, event_time, value]
      timestamp_column: event_time
      tenant_column: company_id
    destinations:
      - {{id: {cid}-dir, type: local, path: outbox/{cid}/daily-spend}}
  - id: hourly-clicks
    interval_hours: 1
    window: {{kind: interval}}
    dst_fold: both
    query: *widget_query
    format: parquet
    destinations:
      - {{id: {cid}-dir, type: local, path: outbox/{cid}/hourly-clicks}}
    deadline: 30m
    recovery: latest

data_exports:
{channels}"""

CHANNEL_YAML = """\
  - channel: {channel}
    size: medium
    primary:
      window: {{days: 90}}
"""

# Runs in the subprocess: argv = mode, dags folder, loader file, dag id, task id.
PROBE = r"""
import os, sys, time
clock = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter
t0 = clock()
import airflow, airflow.sdk
from airflow.dag_processing.dagbag import BundleDagBag, DagBag
t_airflow = clock()
import json
mode, dags_folder, loader, dag_id, task_id = sys.argv[1:6]
if mode != "child":
    import export_airflow.plugin
    import export_airflow.building.dag_factory
t_import = clock()
out = {"import_seconds": t_import - t0, "plugin_import_seconds": t_import - t_airflow}
if mode == "parse":
    bag = DagBag(dag_folder=dags_folder)
    out["parse_seconds"] = clock() - t0
    from airflow.serialization.serialized_objects import DagSerialization
    # The first serialisation of a DAG with a custom timetable loads every plugin (~0.9 s: our
    # UI plugin brings FastAPI), once per process. The dag-processor has them loaded before it
    # forks its parse children (export_airflow.deploy.preload), so none of them pays it: load them
    # here too, outside the timed loop (the "child" probe measures a real fork).
    from airflow import plugins_manager
    plugins_manager.get_timetables_plugins()
    t1 = clock()
    for dag in bag.dags.values():
        DagSerialization.to_dict(dag)
    out["serialize_seconds"] = clock() - t1
    out["dags"] = len(bag.dags)
    out["company_dags"] = sum(d.startswith(("widget_export__", "data_export__")) for d in bag.dags)
    out["import_errors"] = dict(bag.import_errors)
elif mode == "child":
    # What a parse child of the dag-processor pays: the dag-processor's before-fork hook
    # (export_airflow.deploy.preload, from the airflow.policy entry point) has imported the factory
    # in the parent; the child then imports the plugin and parses and serialises one company's
    # file.
    import export_airflow.deploy.preload
    from airflow.serialization.serialized_objects import DagSerialization
    export_airflow.deploy.preload.preload()
    from pathlib import Path
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        c0 = clock()
        import export_airflow.plugin
        import export_airflow.building.dag_factory
        c1 = clock()
        bag = BundleDagBag(dag_folder=loader, bundle_path=Path(dags_folder),
                           bundle_name="dags-folder")
        c2 = clock()
        for dag in bag.dags.values():
            DagSerialization.to_dict(dag)
        c3 = clock()
        os.write(write, json.dumps({"child_plugin_import_seconds": c1 - c0,
                                    "child_serialize_seconds": c3 - c2,
                                    "child_file_seconds": c3 - c0,
                                    "child_dags": len(bag.dags),
                                    "import_errors": dict(bag.import_errors)}).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    out.update(json.loads(os.read(read, 1 << 20)))
elif mode == "worker":
    from pathlib import Path
    t1 = clock()
    bag = BundleDagBag(dag_folder=loader, safe_mode=False, load_op_links=False,
                       bundle_path=Path(dags_folder), bundle_name="dags-folder")
    out["worker_parse_seconds"] = clock() - t1
    out["dags"] = len(bag.dags)
    out["import_errors"] = dict(bag.import_errors)
    out["found"] = dag_id in bag.dags and task_id in bag.dags[dag_id].task_dict
print("BENCH " + json.dumps(out))
"""


def write_config(dags: Path, companies: int) -> list[str]:
    """The temporary dags folder: defaults, company YAMLs and loaders; returns company ids."""
    config = dags / "config"
    config.mkdir(parents=True)
    shutil.copy(SHIPPED_DAGS / "config" / "defaults.yaml", config / "defaults.yaml")
    template = (SHIPPED_DAGS / f"company_{TEMPLATE_COMPANY}.py").read_text(encoding="utf-8")
    for extra in SHIPPED_DAGS.glob("*.py"):  # e.g. demo_feed.py: part of a full parse
        if not extra.name.startswith("company_"):
            shutil.copy(extra, dags / extra.name)
    ids = [f"co{n:05d}" for n in range(companies)]
    for n, cid in enumerate(ids):
        channels = "".join(CHANNEL_YAML.format(channel=c) for c in CHANNELS)
        (config / f"{cid}.yaml").write_text(COMPANY_YAML.format(
            cid=cid, n=n, tz=TIMEZONES[n % len(TIMEZONES)], hour=n % 24, channels=channels),
            encoding="utf-8")
        (dags / f"company_{cid}.py").write_text(template.replace(TEMPLATE_COMPANY, cid),
                                                encoding="utf-8")
    return ids


def probe_env(home: Path, dags: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    })
    return env


def probe_python() -> str:
    """This interpreter if it has Airflow, else the project's ``.venv`` (``make venv``)."""
    if importlib.util.find_spec("airflow") is not None:
        return sys.executable
    venv = ROOT / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    raise SystemExit(f"{sys.executable} cannot import airflow and {venv} does not exist; run "
                     "`make venv`, then `.venv/bin/python bench/parse.py`")


def run_probe(mode: str, env: dict[str, str], dags: Path, loader: Path, dag_id: str,
              task_id: str) -> dict:
    result = subprocess.run(
        [probe_python(), "-c", PROBE, mode, str(dags), str(loader), dag_id, task_id],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{mode} probe failed (exit {result.returncode}):\n"
                         f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    data = json.loads(lines[-1].removeprefix("BENCH "))
    if data.get("import_errors"):
        first = next(iter(data["import_errors"].items()))
        raise SystemExit(f"{mode} parse had {len(data['import_errors'])} import error(s), "
                         f"first {first[0]}:\n{first[1][-3000:]}")
    return data


def measure(companies: int, repeat: int, clock: str = "wall",
            worker_file: str | None = None) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        root = Path(tmp)
        dags, home = root / "dags", root / "home"
        home.mkdir()
        ids = write_config(dags, companies)
        env = {**probe_env(home, dags), "BENCH_CLOCK": clock}
        worker_company = ids[len(ids) // 2]
        loader = dags / f"company_{worker_company}.py"
        dag_id, task_id = f"data_export__{worker_company}__{CHANNELS[-1]}__secondary", "render"
        if worker_file is not None:  # another shipped DAG file, e.g. demo_feed.py
            loader = dags / worker_file
            if not loader.is_file():
                raise SystemExit(f"--worker-file {worker_file}: no such file in {SHIPPED_DAGS}")
            dag_id = loader.stem
        worker_env = {**env, "_AIRFLOW_PARSING_CONTEXT_DAG_ID": dag_id,
                      "_AIRFLOW_PARSING_CONTEXT_TASK_ID": task_id}
        best: dict[str, float] = {}
        dags_found = 0
        for _ in range(repeat):  # interleaved, so a noisy moment hits one sample of each
            parsed = run_probe("parse", env, dags, loader, dag_id, task_id)
            worker = run_probe("worker", worker_env, dags, loader, dag_id, task_id)
            child = run_probe("child", env, dags, loader, dag_id, task_id)
            if parsed["company_dags"] != DAGS_PER_COMPANY * companies:
                raise SystemExit(f"expected {DAGS_PER_COMPANY * companies} company DAGs, "
                                 f"parsed {parsed['company_dags']}")
            if not worker["found"]:
                raise SystemExit(f"worker parse did not find {dag_id}.{task_id}")
            dags_found = parsed["dags"]
            for key, value in (("import_seconds", parsed["import_seconds"]),
                               ("plugin_import_seconds", parsed["plugin_import_seconds"]),
                               ("parse_seconds", parsed["parse_seconds"]),
                               ("dags_seconds", parsed["parse_seconds"] - parsed["import_seconds"]),
                               ("serialize_seconds", parsed["serialize_seconds"]),
                               ("worker_parse_seconds", worker["worker_parse_seconds"]),
                               ("child_plugin_import_seconds",
                                child["child_plugin_import_seconds"]),
                               ("child_file_seconds", child["child_file_seconds"]),
                               ("child_serialize_seconds", child["child_serialize_seconds"])):
                best[key] = min(best.get(key, value), value)
    return {
        "dags": dags_found,
        "parse_seconds": round(best["parse_seconds"], 3),
        "ms_per_dag": round(best["dags_seconds"] / dags_found * 1000, 3),
        "import_seconds": round(best["import_seconds"], 3),
        "plugin_import_seconds": round(best["plugin_import_seconds"], 3),
        "serialize_seconds": round(best["serialize_seconds"], 3),
        "worker_parse_seconds": round(best["worker_parse_seconds"], 3),
        "serialize_ms_per_dag": round(best["serialize_seconds"] / dags_found * 1000, 3),
        "child_plugin_import_seconds": round(best["child_plugin_import_seconds"], 4),
        "child_file_seconds": round(best["child_file_seconds"], 3),
        "child_serialize_seconds": round(best["child_serialize_seconds"], 4),
    }


def measure_dag_processor(companies: int, metadata_db: Path | None = None
                          ) -> dict[str, float | int]:
    """End to end: one pass of a real ``airflow dag-processor -n 1`` over the generated folder,
    as deployed (our ``airflow.policy`` entry point, so the factory is imported before it forks;
    its default two parsing processes), writing every DAG to a SQLite metadata database made by
    ``airflow db migrate`` (or a copy of ``metadata_db``, an already migrated one). CPU is the
    dag-processor's and all its parse children's."""
    import resource
    import sqlite3
    import time

    with tempfile.TemporaryDirectory(prefix="bench-dag-processor-") as tmp:
        root = Path(tmp)
        dags, home = root / "dags", root / "home"
        (home / "config").mkdir(parents=True)
        write_config(dags, companies)
        env = {**probe_env(home, dags), "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
               "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "600"}
        airflow = str(Path(probe_python()).parent / "airflow")
        log = root / "dag-processor.log"
        if metadata_db is not None:
            shutil.copyfile(metadata_db, home / "airflow.db")
        else:
            subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True,
                           timeout=600)
        def one_pass() -> tuple[float, float]:
            """(wall, CPU) seconds of one ``airflow dag-processor -n 1`` (start-up included)."""
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            with log.open("w") as out:
                done = subprocess.run([airflow, "dag-processor", "-n", "1"], env=env,
                                      stdout=out, stderr=subprocess.STDOUT, timeout=7200,
                                      check=False)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise SystemExit(f"dag-processor exited {done.returncode}:\n"
                                 f"{log.read_text()[-5000:]}")
            return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

        wall, cpu = one_pass()  # every DAG new: written to the database
        # Then what it does every min_file_process_interval: parse every unchanged file again,
        # compare, write nothing new (a second process, so its start-up is counted again).
        steady_wall, steady_cpu = one_pass()
        with sqlite3.connect(home / "airflow.db") as db:
            stored = db.execute("SELECT count(DISTINCT s.dag_id) FROM serialized_dag s JOIN dag d"
                                " ON d.dag_id = s.dag_id WHERE d.fileloc LIKE ?",
                                (f"{dags}/%",)).fetchone()[0]
            errors = db.execute("SELECT count(*) FROM import_error WHERE filename LIKE "
                                "'company_co%'").fetchone()[0]
        if errors or stored < (DAGS_PER_COMPANY + 1) * companies:
            raise SystemExit(f"dag-processor stored {stored} DAGs of {dags} with {errors} import "
                             f"errors (expected {(DAGS_PER_COMPANY + 1) * companies} company "
                             f"DAGs at least): {log}")
        return {"dags": stored, "pass_wall_seconds": round(wall, 1),
                "pass_cpu_seconds": round(cpu, 1),
                "cpu_ms_per_dag": round(cpu / stored * 1000, 2),
                "steady_pass_wall_seconds": round(steady_wall, 1),
                "steady_pass_cpu_seconds": round(steady_cpu, 1),
                "steady_cpu_ms_per_dag": round(steady_cpu / stored * 1000, 2),
                # docs/explanation/scale.md: min_file_process_interval=600 re-parses every unchanged file
                # once per 10 minutes (a changed one at once): a steady pass spread over 600 s.
                "steady_cores_at_600s": round(steady_cpu / 600, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--companies", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per figure, interleaved; the minimum is kept (default 3)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall-clock time (default) or the subprocess's CPU time")
    parser.add_argument("--worker-file", metavar="NAME.py",
                        help="time the worker parse of this other shipped DAG file (its DAG id "
                             "is the file stem, task 'render') instead of a company DAG")
    parser.add_argument("--dag-processor", action="store_true",
                        help="instead, time one pass of a real dag-processor writing every DAG "
                             "to a SQLite metadata database (end to end)")
    parser.add_argument("--metadata-db", type=Path, metavar="AIRFLOW.DB",
                        help="with --dag-processor: start from a copy of this migrated SQLite "
                             "metadata database instead of running `airflow db migrate`")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from results import add_record_flag

    add_record_flag(parser)
    args = parser.parse_args(argv)
    if args.companies < 1 or args.repeat < 1:
        parser.error("--companies and --repeat must be at least 1")
    if args.dag_processor:
        result: dict = {"dag_processor": measure_dag_processor(args.companies, args.metadata_db)}
    else:
        result = measure(args.companies, args.repeat, args.clock, args.worker_file)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    if args.record:
        from results import record

        bench = ("parse-dag-processor" if args.dag_processor else
                 f"parse-worker-{Path(args.worker_file).stem}" if args.worker_file else "parse")
        record(bench, figures(result, args.companies), summary=result,
               argv=sys.argv[1:] if argv is None else argv)
    return 0


def figures(result: dict, companies: int) -> list:
    """The table rows (bench/RESULTS.md): the full parse against its fixed import cost, per
    DAG, and a worker's one-DAG parse; or the dag-processor's pass per DAG."""
    from results import Figure

    if "dag_processor" in result:
        r = result["dag_processor"]
        return [Figure("dag-processor pass", f"one pass writing {r['dags']:,} DAGs of "
                       f"{companies:,} companies (CPU)", r["cpu_ms_per_dag"], "ms/DAG"),
                Figure("dag-processor steady pass", "a pass over unchanged files (CPU)",
                       r["steady_cpu_ms_per_dag"], "ms/DAG")]
    return [Figure("full parse", f"DagBag of {result['dags']:,} DAGs ({companies:,} "
                   "companies), imports included", result["parse_seconds"], "s",
                   f"imports alone {result['import_seconds']:g} s",
                   round(result["parse_seconds"] / result["import_seconds"], 3)),
            Figure("parse per DAG", "full parse minus imports, per DAG", result["ms_per_dag"],
                   "ms/DAG"),
            Figure("worker parse", "a task's parse of its one DAG (after the imports)",
                   result["worker_parse_seconds"], "s")]


if __name__ == "__main__":
    sys.exit(main())
