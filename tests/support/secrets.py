"""A secrets backend for tests/dags/test_connections.py's subprocess, in a module of its own:
a test module that imported Airflow at its top would load Airflow into every worker that
collects it, those that run no tests/dags file included (tests/unit/test_tiers.py)."""

from __future__ import annotations

from airflow.secrets import BaseSecretsBackend


class DenyingBackend(BaseSecretsBackend):
    """A secrets backend (configured as ``[secrets] backend``) that refuses every lookup, the
    way a Vault policy or an IAM deny answers."""

    def get_connection(self, conn_id: str):
        from airflow.sdk.exceptions import AirflowSecretsBackendAccessDenied

        raise AirflowSecretsBackendAccessDenied(f"policy denies reading {conn_id}")

    def get_variable(self, key: str):
        return None
