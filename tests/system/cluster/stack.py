"""A `make cluster` stack in a copy of the project, on free ports (tests/system/soak/stack.py's Stack
with the cluster's targets, state directory and extra ports; its databases on the session's
PostgreSQL the same way)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.services.ports import free_port
from tests.system.soak.stack import Stack, copy_project

COPIED_TOO = ("docker-compose.yaml",)


def free_udp_port() -> int:
    """A UDP port nothing listens on (the StatsD listener's)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster(Stack):
    redisport: int = 0
    s3port: int = 0
    statsdport: int = 0

    @classmethod
    def in_copy(cls, dest: Path, *, local_pg: bool = False, **extra_env: str) -> Cluster:
        root = copy_project(dest)
        for name in COPIED_TOO:
            (root / name).write_bytes((Path(__file__).resolve().parents[3] / name).read_bytes())
        return cls(root, free_port(), extra_env=dict(extra_env), redisport=free_port(),
                   s3port=free_port(), statsdport=free_udp_port(),
                   **cls.database_choice(local_pg))

    @property
    def home(self) -> Path:
        return self.root / ".airflow-cluster"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    def environ(self) -> dict[str, str]:
        return {**super().environ(), "CLUSTER": "1", "REDISPORT": str(self.redisport),
                "S3PORT": str(self.s3port), "STATSDPORT": str(self.statsdport)}

    def statsd_names(self) -> set[str]:
        """The metric names the cluster's StatsD listener received (scripts/statsd_sink.py)."""
        try:
            text = (self.run_dir / "statsd.txt").read_text(errors="replace")
        except FileNotFoundError:
            return set()
        return {line.split(":", 1)[0] for line in text.splitlines()}

    def remembered(self) -> dict[str, str]:
        text = (self.home / "run.env").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def start(self) -> None:
        result = self.make("cluster")
        if result.returncode != 0:
            raise AssertionError(f"make cluster failed ({result.returncode}):\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")

    def stop(self) -> subprocess.CompletedProcess:
        return self.make("cluster-stop", timeout=180)

    def processes(self) -> list[int]:
        out = subprocess.run([str(self.root / ".venv" / "bin" / "python"), "scripts/supervise.py",
                              "leftovers"], cwd=self.root, capture_output=True, text=True,
                             check=True, env={**self.environ(), "ROOT": str(self.root),
                                              "AIRFLOW_HOME": str(self.home)})
        return [int(p) for p in out.stdout.split()]

    def postgres_running(self) -> bool:
        pid_file = self.home / "pg" / "postmaster.pid"
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            return False
        return True

    def ledger_attempts(self, run_key: str) -> list[str]:
        """The states of the run's attempts, by generation (read from the ledger database)."""
        import psycopg

        with psycopg.connect(self.database_url("exports")) as conn:
            return [state for (state,) in conn.execute(
                "SELECT a.state FROM export_attempts a JOIN export_runs r ON r.id = a.run_id "
                "WHERE r.run_key = %s ORDER BY a.generation", (run_key,)).fetchall()]

    def check_bundles(self, api, companies: dict[str, str]) -> dict[str, str]:
        """With DAG_PROCESSORS=2: each company's DAG (``companies``: id → a DAG id of it) came
        from its bundle (the stable hash of its loader's name), both bundles have DAGs, and each
        dag-processor's log names only its own bundle. Returns company → bundle."""
        from export_lib.config.bundles import bundle_name, bundle_part

        dags = api.ok("GET", "/api/v2/dags?limit=500")["dags"]
        bundles = {d["dag_id"]: d["bundle_name"] for d in dags}
        found = {cid: bundles.get(dag_id) for cid, dag_id in companies.items()}
        assert found == {cid: bundle_name(bundle_part(f"company_{cid}.py", 2))
                         for cid in companies}, found
        assert set(bundles.values()) == {"dags-1", "dags-2"}, set(bundles.values())
        for n, other in ((1, 2), (2, 1)):
            log = (self.run_dir / f"dag-processor-{n}.log").read_text(errors="replace")
            # The manager's line for each bundle it parses (both are known to both, by config).
            looked = "Checking for new files in bundle dags-{} every"
            assert looked.format(n) in log and looked.format(other) not in log, n
            # make cluster's setup registered the bundles before both started: neither raced
            # the other to insert them (either may still exit once on Airflow's own race to
            # insert an asset DAGs of both bundles name, and is restarted: docs/how-to/deploy.md).
            assert "dag_bundle_pkey" not in log, n
        return found

    def s3(self):
        import boto3

        return boto3.session.Session().client(
            "s3", endpoint_url=f"http://127.0.0.1:{self.s3port}", region_name="us-east-1",
            aws_access_key_id="exports", aws_secret_access_key="exports")
