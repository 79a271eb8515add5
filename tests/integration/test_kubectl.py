"""``kubectl create --dry-run=client --validate=false -f`` accepts the Kubernetes files we ship
(issue 24 item 4, ADR 0026). A client-side dry run sends no object, but kubectl still asks an
API server which groups and kinds exist; no cluster is reachable here, so it asks a local
server that answers discovery only (tests/services/kube_discovery.py), and we check that kubectl
only read from it. With ``--validate=false`` kubectl checks the YAML, apiVersion and kind, not
the fields: tests/unit/test_kubernetes_templates.py checks those against the API's models."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.services.kube_discovery import discovery_server
from tests.world import REPO

WORKER = REPO / "deploy" / "kubernetes" / "worker-large.yaml"


def _kubectl(path: Path, tmp_path: Path, server: str) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: apt-get install kubernetes-client "
                    "(scripts/ensure-debian-packages.sh does it for make test)")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "discovery",
        "clusters": [{"name": "discovery", "cluster": {"server": server}}],
        "contexts": [{"name": "discovery", "context": {"cluster": "discovery",
                                                        "namespace": "exports"}}],
        "users": []}))
    return subprocess.run(
        [kubectl, "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "cache"),
         "create", "--dry-run=client", "--validate=false", "-f", str(path), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False)


def test_kubectl_dry_run_accepts_the_large_worker(tmp_path: Path):
    with discovery_server() as (url, requests):
        result = _kubectl(WORKER, tmp_path, url)
    assert result.returncode == 0, result.stderr
    # The object kubectl would create: the file's, in the context's namespace.
    shipped = yaml.safe_load(WORKER.read_text())
    assert json.loads(result.stdout) == {
        **shipped, "metadata": {**shipped["metadata"], "namespace": "exports"}}
    assert {method for method, _ in requests} == {"GET"}  # discovery read, nothing sent
    assert ("GET", "/apis/apps/v1") in requests


def test_kubectl_refuses_a_kind_the_api_does_not_have(tmp_path: Path):
    """The check above can fail: a misspelled kind is refused, naming it."""
    broken = tmp_path / "worker-large.yaml"
    broken.write_text(WORKER.read_text().replace("kind: Deployment", "kind: Deploymnt", 1))
    with discovery_server() as (url, _):
        result = _kubectl(broken, tmp_path, url)
    assert result.returncode == 1
    assert 'no matches for kind "Deploymnt" in version "apps/v1"' in result.stderr
