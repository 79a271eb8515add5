"""TEST-ONLY auth manager: Airflow's SimpleAuthManager plus per-company DAG grants.

The stack's auth manager (SimpleAuthManager; the FAB provider is not installed) has roles only:
every viewer may read every DAG. Per-DAG permissions — "this user may read company A's DAGs" —
are what FAB (or Keycloak) provides in production. This subclass stands in for them so a real
api-server can be asked the real question: ``EXPORT_TEST_DAG_GRANTS="alice=acme;bob=acme,kiwi"``
limits those users to the DAGs of those companies (``<kind>__<company>[__…]`` ids), for every
method; other users keep SimpleAuthManager's role rules. Everything else — login, tokens,
``get_authorized_dag_ids``, the REST API's own DAG filtering — is Airflow's unchanged code.

Copied into the test stack's plugins folder (on ``sys.path``); never shipped.
"""

from __future__ import annotations

import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _grants() -> dict[str, set[str]]:
    grants: dict[str, set[str]] = {}
    for item in os.environ.get("EXPORT_TEST_DAG_GRANTS", "").split(";"):
        user, _, companies = item.partition("=")
        if user.strip():
            grants[user.strip()] = {c.strip() for c in companies.split(",") if c.strip()}
    return grants


class TenantTestAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        companies = _grants().get(user.get_name())
        if companies is None:
            return super().is_authorized_dag(method=method, user=user,
                                             access_entity=access_entity, details=details)
        if details is None or not details.id:  # "all DAGs": never for a granted user
            return False
        parts = details.id.split("__")
        return len(parts) >= 2 and parts[1] in companies and super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details)
