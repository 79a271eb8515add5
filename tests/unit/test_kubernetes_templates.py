"""deploy/kubernetes/worker-large.yaml, the large channels' Celery worker on Kubernetes (ADR
0026), checked against the Kubernetes API's schema as the ``kubernetes`` client's models carry it
(pinned in the lock): deserialised into ``V1Deployment`` with the client's own validation
(required fields), then serialised back; a key the models do not know is dropped on the way, so
a misspelled or misplaced field shows as a difference, with its path. And it is compose's
``airflow-worker-large``: the same queue, image, settings and size as the large renders' pod.
kubectl's client-side dry run of the file: tests/integration/test_kubectl.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "deploy" / "kubernetes" / "worker-large.yaml"


def model_problems(document: dict[str, Any], model: str) -> list[str]:
    """What the kubernetes client's ``model`` refuses or drops in ``document``: [] when it keeps
    every field."""
    from kubernetes.client import ApiClient

    class _Response:  # ApiClient.deserialize reads ``.data``
        data = json.dumps(document)

    try:
        parsed = ApiClient().deserialize(_Response(), model)
    except ValueError as exc:  # the models' client-side validation: a required field is missing
        return [f"{model}: {exc}"]
    return _dropped(document, ApiClient().sanitize_for_serialization(parsed), "")


def _dropped(given: Any, kept: Any, path: str) -> list[str]:
    if isinstance(given, dict):
        kept = kept if isinstance(kept, dict) else {}
        return [problem for key, value in given.items() for problem in (
            _dropped(value, kept[key], f"{path}.{key}".lstrip(".")) if key in kept
            else [f"{path}.{key}".lstrip(".") + ": not a field of the Kubernetes API here"])]
    if isinstance(given, list):
        kept = kept if isinstance(kept, list) else []
        return [problem for i, value in enumerate(given) for problem in (
            _dropped(value, kept[i], f"{path}[{i}]") if i < len(kept) else [f"{path}[{i}]: lost"])]
    return [] if given == kept else [f"{path}: {given!r} became {kept!r}"]


def template() -> dict[str, Any]:
    return yaml.safe_load(TEMPLATE.read_text())


def test_the_large_worker_is_a_deployment_the_kubernetes_models_keep_whole():
    document = template()
    assert (document["apiVersion"], document["kind"]) == ("apps/v1", "Deployment")
    assert model_problems(document, "V1Deployment") == []


def test_the_model_check_names_a_misspelled_field_and_a_missing_one():
    """The check above can fail: a misspelled key is named with its path, a missing required
    field with the model's own message."""
    document = template()
    container = document["spec"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")
    assert model_problems(document, "V1Deployment") == [
        "spec.template.spec.containers[0].resource: not a field of the Kubernetes API here"]
    document = template()
    del document["spec"]["selector"]
    assert model_problems(document, "V1Deployment") == [
        "V1Deployment: Invalid value for `selector`, must not be `None`"]


def _compose_worker() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())["services"][
        "airflow-worker-large"]


def test_the_pod_runs_compose_s_large_worker():
    """Queue, concurrency, image and every setting of compose's worker: a literal where compose
    writes one, the Secret ``export-airflow`` where compose takes a value from .env."""
    compose = _compose_worker()
    pod = template()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == compose["command"].split()
    assert container["image"] == compose["image"].removeprefix("${EXPORT_IMAGE_NAME:-").rstrip("}")
    assert container["envFrom"] == [{"configMapRef": {"name": "export-cluster-env"}}]
    expected = []
    for name, value in compose["environment"].items():
        if "${" in str(value):
            expected.append({"name": name, "valueFrom": {"secretKeyRef": {
                "name": "export-airflow", "key": name}}})
        else:
            expected.append({"name": name, "value": str(value)})
    assert container["env"] == expected


def test_the_pod_is_sized_like_the_large_renders_and_outlives_a_render_lease():
    pod = template()["spec"]["template"]["spec"]
    override = yaml.safe_load((REPO / "docs" / "kubernetes" / "large-render-pod.yaml").read_text())
    assert pod["containers"][0]["resources"] == override["spec"]["containers"][0]["resources"]
    labels = template()["spec"]["template"]["metadata"]["labels"]
    assert template()["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["export-channel-size"] == override["metadata"]["labels"]["export-channel-size"]
    cluster_env = dict(line.split("=", 1) for line in
                       (REPO / "deploy" / "cluster.env").read_text().splitlines()
                       if line and not line.startswith("#"))
    assert pod["terminationGracePeriodSeconds"] == int(
        cluster_env["EXPORT_RENDER_LEASE_SECONDS"]) + 30


@pytest.mark.parametrize("key", ["AIRFLOW__CORE__FERNET_KEY", "EXPORT_LEDGER_URL"])
def test_no_secret_is_written_in_the_template(key):
    (container,) = template()["spec"]["template"]["spec"]["containers"]
    (entry,) = [e for e in container["env"] if e["name"] == key]
    assert "value" not in entry
