"""The DAG factory, what the tasks import when they run and the plugins are loaded once in the
processes that fork tasks and parse children (plugins/export_airflow/deploy/preload.py, issue 25 item
2), so a fork finds them loaded; other processes import nothing more."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from export_airflow.deploy.preload import forking_component

from tests.conftest import REPO

FORK = """
import os, sys
sys.argv = sys.argv[1:]
from export_airflow.deploy.preload import MODULES, install
component = install()
before = any(m in sys.modules for m in MODULES)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    from airflow.sdk.listener import get_listener_manager
    cached = get_listener_manager.cache_info().currsize == 1
    import boto3, botocore.loaders
    from export_lib.storage.clients import share_loader
    reads, load_file = [], botocore.loaders.JSONFileLoader.load_file
    botocore.loaders.JSONFileLoader.load_file = lambda s, p: reads.append(p) or load_file(s, p)
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s",
                                    region_name="eu-west-1")
    share_loader(session)
    session.client("s3")  # what render, publish and deliver each do
    loaded = all(m in sys.modules for m in MODULES) and cached
    before_asset = set(sys.modules)
    from export_airflow.tasks.assets import schedule_asset
    schedule_asset("acme", "acme/daily-spend")  # what parsing any export DAG builds
    assets = "asset-imports" if set(sys.modules) - before_asset else "no-asset-imports"
    os.write(w, f"{loaded} {'reads' if reads else 'no-reads'} {assets}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(component, before, os.read(r, 64).decode())
"""


@pytest.mark.parametrize(("argv", "component"), [
    (["/opt/venv/bin/airflow", "scheduler"], "scheduler"),
    (["airflow", "dag-processor", "--subdir", "x"], "dag-processor"),
    (["airflow", "celery", "worker", "--queues", "exports_large"], "celery worker"),
    (["/usr/lib/python3/site-packages/airflow/__main__.py", "scheduler"], "scheduler"),
    (["airflow", "api-server"], None),
    (["airflow", "triggerer"], None),
    (["airflow", "tasks", "test", "scheduler"], None),
    (["airflow", "celery", "flower"], None),
    (["pytest", "scheduler"], None),
    ([], None),
])
def test_only_the_forking_components_preload(argv, component):
    assert forking_component(argv) == component


@pytest.mark.parametrize(("argv", "expected"), [
    # botocore's S3 data and the providers' asset URI handlers loaded too
    ("airflow scheduler", "scheduler False True no-reads no-asset-imports"),
    ("airflow dags list", "None False False reads asset-imports"),
])
def test_a_fork_of_the_scheduler_has_the_modules_and_plugins_loaded(argv, expected):
    # Artifacts on S3 (make cluster, compose): an asset's s3:// URI is normalised by the
    # providers' asset URI handlers (file:// needs none).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")]),
           "EXPORT_ARTIFACT_ROOT": "s3://exports-artifacts/exports"}
    out = subprocess.run([sys.executable, "-c", FORK, *argv.split()], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == expected, out.stdout[-2000:]
