"""`make cluster` and docker-compose.yaml run one topology: deploy/cluster.env feeds both (every
Airflow service of the compose file resolves exactly its values, and so does the environment
scripts/airflow-env.sh gives `make cluster`), and the workers serve the same queues with the
same concurrency."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.test_foundation import REPO, _compose, _compose_cmd

AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer", "airflow-worker", "airflow-worker-manual",
                    "airflow-worker-large", "airflow-init")


def shared_settings() -> dict[str, str]:
    lines = (REPO / "deploy" / "cluster.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def resolved_compose(tmp_path: Path) -> dict:
    cmd = _compose_cmd()
    if cmd is None:
        pytest.fail("neither 'docker compose' nor 'docker-compose' is installed; "
                    "run scripts/ensure-debian-packages.sh")
    env_file = tmp_path / ".env"
    env_file.write_text(subprocess.run(["bash", str(REPO / "scripts" / "compose-env.sh")],
                                       capture_output=True, text=True, check=True).stdout)
    result = _compose(cmd, env_file=env_file)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def make_cluster_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What scripts/airflow-env.sh exports for `make cluster` (no server is started)."""
    script = f"CLUSTER=1 PGPORT=5999 REDISPORT=6999 S3PORT=9999 PORT=8999 source " \
             f"{shlex.quote(str(REPO / 'scripts' / 'airflow-env.sh'))} && env -0"
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **extra}).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def test_compose_and_make_cluster_share_deploy_cluster_env(tmp_path: Path):
    shared = shared_settings()
    assert shared["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    services = resolved_compose(tmp_path)["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert {k: str(env.get(k)) for k in shared} == shared, name
    local = make_cluster_environ(tmp_path)
    assert {k: local.get(k) for k in shared} == shared
    assert local["AIRFLOW_HOME"].endswith("/.airflow-cluster")
    # What differs is only where things are: compose's service names vs local ports.
    assert local["AIRFLOW__CELERY__BROKER_URL"] == "redis://127.0.0.1:6999/0"
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__CELERY__BROKER_URL"].endswith(
        "@redis:6379/0")
    for key in ("AIRFLOW_CONN_ARTIFACTS_S3", "EXPORT_LEDGER_URL",
                "AIRFLOW__CELERY__RESULT_BACKEND", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        assert key in local and key in services["airflow-scheduler"]["environment"], key


def test_the_workers_serve_the_same_queues_in_compose_and_make_cluster(tmp_path: Path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    from export_airflow.deploy.cluster_policy import MANUAL_QUEUE, QUEUES

    services = resolved_compose(tmp_path)["services"]
    compose = {name: services[name]["command"] for name in ("airflow-worker",
                                                            "airflow-worker-manual",
                                                            "airflow-worker-large")}
    local = {name: " ".join(["celery", "worker", *args])
             for name, args in supervise.CLUSTER_WORKERS.items()}
    assert compose == {"airflow-worker": local["worker-default"],
                       "airflow-worker-manual": local["worker-manual"],
                       "airflow-worker-large": local["worker-large"]}
    served = {name: args[args.index("--queues") + 1].split(",")
              for name, args in supervise.CLUSTER_WORKERS.items()}
    # every queue the cluster policy routes to has a worker, and exactly one: manual exports'
    # worker serves nothing else and no other worker serves them (ADR 0018)
    assert sorted(q for queues in served.values() for q in queues) == sorted(QUEUES)
    assert served["worker-manual"] == [MANUAL_QUEUE]


def test_celery_workers_1_runs_one_worker_serving_every_queue(tmp_path: Path):
    """`make cluster CELERY_WORKERS=1` (bench/recovery.py --executor celery): exactly one Celery
    worker, and it serves every queue the cluster policy routes to; any other count is refused
    with the choices, and so is the variable without the cluster."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    from export_airflow.deploy.cluster_policy import QUEUES

    local = make_cluster_environ(tmp_path, CELERY_WORKERS="1")
    comps = supervise.components_from_env({
        **local, "CLUSTER": "1", "PGPORT": "5999", "REDISPORT": "6999", "S3PORT": "9999",
        "PORT": "8999", "ROOT": str(REPO), "PG_DATA": "/x", "PG_BIN": "/usr/lib/postgresql/16/bin"})
    workers = [c for c in comps if c.argv[1:3] == ["celery", "worker"]]
    assert [w.name for w in workers] == ["worker"]
    argv = workers[0].argv
    assert sorted(argv[argv.index("--queues") + 1].split(",")) == sorted(QUEUES)
    script = REPO / "scripts" / "airflow-env.sh"
    for prefix in ("CLUSTER=1 CELERY_WORKERS=2", "CELERY_WORKERS=1"):
        refused = subprocess.run(["bash", "-c", f"{prefix} source {shlex.quote(str(script))}"],
                                 capture_output=True, text=True,
                                 env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert refused.returncode == 2, prefix
        assert refused.stderr.strip().startswith(
            f"CELERY_WORKERS={prefix[-1]} is not a choice: make cluster CELERY_WORKERS=1 "), prefix


def test_an_orphaned_redis_server_is_a_leftover_of_its_stack(tmp_path: Path):
    """redis-server renames itself (its /proc environ no longer holds the stack's marker): a
    fast teardown that kills the supervisor first must still find it by its run directory,
    and leave another stack's Redis alone."""
    import os
    import signal
    import time

    from tests.services.ports import free_port

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    mine, other = tmp_path / "a" / "run", tmp_path / "b" / "run"
    procs = []
    for run_dir in (mine, other):
        run_dir.mkdir(parents=True)
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(free_port()), "--bind", "127.0.0.1", "--save", ""],
            cwd=run_dir, env={"PATH": os.environ["PATH"],
                              supervise.MARKER: str(run_dir)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        time.sleep(1.0)  # it renames itself at start
        found = supervise.stack_processes(mine, tmp_path / "a")
        assert procs[0].pid in found and procs[1].pid not in found, (found, procs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def test_an_orphaned_celery_worker_is_a_leftover_of_its_stack(tmp_path: Path):
    """A Celery worker renames itself (``[celeryd: …]``, its /proc environ overwritten): a fast
    teardown that kills the supervisor first must still find it by the project directory it
    works in, and leave another stack's worker alone. (The fault test's two workers outlived
    every teardown before this.)"""
    import os
    import signal

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    title = "[celeryd: worker-default@vm:MainProcess] -active- (celery worker --queues default)"
    rename = ("import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); "
              "print('renamed', flush=True); time.sleep(60)")
    procs = []
    for name in ("a", "b"):
        root = tmp_path / name
        (root / ".airflow-cluster" / "run").mkdir(parents=True)
        proc = subprocess.Popen([sys.executable, "-c", rename, title], cwd=root,
                                env={"PATH": os.environ["PATH"],
                                     supervise.MARKER: str(root / ".airflow-cluster" / "run")},
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "renamed"
        mine = tmp_path / "a"
        found = supervise.stack_processes(mine / ".airflow-cluster" / "run", mine)
        assert procs[0].pid in found and procs[1].pid not in found, (found, procs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.parametrize(("preset", "listed", "reparsed"), [
    ({}, "30", "30"),  # make run / make cluster: every 30 s
    # the test suite's shared stack: a company file a module writes is found within 5 s
    ({"AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
      "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "45"}, "5", "45"),
])
def test_the_dags_folder_intervals_default_to_30s_and_a_preset_value_wins(
        tmp_path: Path, preset: dict[str, str], listed: str, reparsed: str):
    script = f"PGPORT=5999 PORT=8999 source " \
             f"{shlex.quote(str(REPO / 'scripts' / 'airflow-env.sh'))} && env -0"
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **preset}).stdout
    env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    assert env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] == listed
    assert env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] == reparsed


def test_json_logs_and_statsd_are_on_in_compose_and_make_cluster(tmp_path: Path):
    """deploy/cluster.env switches on JSON logs (Airflow's and ours) and StatsD for both; compose
    sends to its statsd-exporter (with the mapping the Grafana dashboard is checked against),
    `make cluster` to the supervisor's listener on its own UDP port, started before anything
    that sends."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import supervise
    finally:
        sys.path.remove(str(REPO / "scripts"))
    shared = shared_settings()
    assert {k: shared.get(k) for k in ("AIRFLOW__LOGGING__JSON_LOGS", "EXPORT_LOG_FORMAT",
                                       "AIRFLOW__METRICS__STATSD_ON")} == {
        "AIRFLOW__LOGGING__JSON_LOGS": "True", "EXPORT_LOG_FORMAT": "json",
        "AIRFLOW__METRICS__STATSD_ON": "True"}
    services = resolved_compose(tmp_path)["services"]
    env = services["airflow-worker"]["environment"]
    assert (env["AIRFLOW__METRICS__STATSD_HOST"], env["AIRFLOW__METRICS__STATSD_PORT"]) == (
        "statsd-exporter", "9125")
    exporter = services["statsd-exporter"]
    assert "--statsd.listen-udp=:9125" in exporter["command"]
    assert any(str(v).split(":")[0].endswith("deploy/statsd/mapping.yml")
               or (isinstance(v, dict) and v.get("source", "").endswith("deploy/statsd/mapping.yml"))
               for v in exporter["volumes"]), exporter["volumes"]
    local = make_cluster_environ(tmp_path)
    assert (local["AIRFLOW__METRICS__STATSD_HOST"], local["AIRFLOW__METRICS__STATSD_PORT"],
            local["STATSDPORT"]) == ("127.0.0.1", local["STATSDPORT"], local["STATSDPORT"])
    # What the supervisor's environment adds: the command line's ports, run.sh's PG paths.
    comps = supervise.components_from_env({
        **local, "CLUSTER": "1", "PGPORT": "5999", "REDISPORT": "6999", "S3PORT": "9999",
        "PORT": "8999", "ROOT": str(REPO), "PG_DATA": "/x", "PG_BIN": "/usr/lib/postgresql/16/bin"})
    names = [c.name for c in comps]
    assert names.index("statsd") < names.index("api-server"), names
    assert comps[names.index("statsd")].argv[-2:] == [
        local["STATSDPORT"], local["AIRFLOW_HOME"] + "/run/statsd.txt"]


def _until(check, seconds: float = 10) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.05)


def test_the_statsd_listener_writes_every_metric_line_it_receives(tmp_path: Path):
    """scripts/statsd_sink.py: one metric a line, as sent; a multi-metric datagram split."""
    import socket

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import ports
    finally:
        sys.path.remove(str(REPO / "scripts"))
    port, out = ports.first_free(18125, socket.SOCK_DGRAM), tmp_path / "statsd.txt"
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "statsd_sink.py"), str(port),
                             str(out)])
    try:
        _until(lambda: not ports.is_free(port, socket.SOCK_DGRAM))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"airflow.export.render.rows.acme.daily-spend:12|c", ("127.0.0.1", port))
            s.sendto(b"airflow.scheduler_heartbeat:1|c\nairflow.executor.open_slots:4|g\n",
                     ("127.0.0.1", port))
        _until(lambda: out.exists() and out.read_text().count("\n") >= 3)
        assert out.read_text().splitlines() == [
            "airflow.export.render.rows.acme.daily-spend:12|c", "airflow.scheduler_heartbeat:1|c",
            "airflow.executor.open_slots:4|g"]
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
