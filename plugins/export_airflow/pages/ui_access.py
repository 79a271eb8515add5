"""Who may read and who may act on the export pages, asked of Airflow's auth manager.

* Read: the companies whose DAGs the user may read (``visible_companies``; 403 when none).
* Act (release, requeue, revoke): the user must be allowed to *edit* the run's own DAG
  (``is_authorized_dag(method="PUT", details=DagDetails(id=<the run's DAG>))``), the same
  permission that lets them clear or trigger it in Airflow; otherwise 403 and nothing changes.
* Forged requests: every action form carries a token bound to the user and the run that
  expires (``export_lib.views.action_tokens``: an HMAC under ``EXPORT_UI_SECRET``, else
  ``[api] secret_key``, else ``[api_auth] jwt_secret``, which every api-server shares; without
  one no action is offered or accepted), and a request whose ``Origin`` is another site is
  refused. The session itself is Airflow's JWT cookie.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from fastapi import Depends, HTTPException, Request

from export_airflow.airflow_compat import get_user_dependency

# The signed-in user, as Airflow's own API routes resolve it (not public: airflow_compat).
GetUserDep = get_user_dependency()

EVERY_DAG_PROBE = "export__any-dag__"  # no DAG has this id, so no role grants it by name


def unscoped_refusal(manager: object) -> str | None:
    """Why the pages are off under ``manager`` (None: they may serve). SimpleAuthManager knows
    roles, not DAGs: each of its users would read every company's runs, receipts and errors."""
    from export_airflow.airflow_compat import is_simple_auth_manager
    from export_lib import settings
    from export_lib.errors import ConfigError

    if not is_simple_auth_manager(manager):
        return None
    try:
        if settings.ui_allow_unscoped_auth():
            return None
    except ConfigError as exc:
        return f"The export pages are off: {exc}"
    return (f"The export pages are off: the auth manager {type(manager).__name__} cannot limit "
            "a user to one company's DAGs, so every user would read every company's runs. Use "
            "the FAB auth manager (make run does; ADR 0023), or set "
            f"{settings.UI_ALLOW_UNSCOPED_ENV}=true for a single-tenant setup.")


def visible_companies(user: GetUserDep) -> frozenset[str] | None:
    """The companies this user may see (None: every company), or 403 when none; 503 under an
    auth manager that cannot scope DAGs (unless explicitly allowed)."""
    from export_lib.views.visibility import companies_of

    manager = get_auth_manager()
    refusal = unscoped_refusal(manager)
    if refusal:
        raise HTTPException(status_code=503, detail=refusal)
    # "Every DAG": may this user read a DAG nobody was ever granted? (FAB answers a read
    # without a DAG id with "may list DAGs", which a one-company viewer may: ADR 0023.)
    if manager.is_authorized_dag(method="GET", user=user, details=DagDetails(id=EVERY_DAG_PROBE)):
        return None
    companies = companies_of(manager.get_authorized_dag_ids(user=user, method="GET"))
    if not companies:
        raise HTTPException(status_code=403, detail="you may read no export DAG")
    return companies


Visible = Depends(visible_companies)


def may_edit(user, dag_id: str) -> bool:
    """May ``user`` edit (clear, trigger, pause) the DAG ``dag_id``?"""
    return get_auth_manager().is_authorized_dag(method="PUT", user=user,
                                                details=DagDetails(id=dag_id))


def secret() -> str | None:
    """The key of the action tokens: ``EXPORT_UI_SECRET``, else ``[api] secret_key``, else
    ``[api_auth] jwt_secret`` (None: none configured, so no action is possible)."""
    from airflow.configuration import conf

    from export_lib import settings

    return (settings.ui_secret() or conf.get("api", "secret_key", fallback="")
            or conf.get("api_auth", "jwt_secret", fallback="") or None)


def action_token(user_name: str, run_key: str) -> str:
    """The anti-forgery token of ``user_name``'s action forms for ``run_key`` (it expires;
    ``ActionTokenError`` when no secret is configured)."""
    from export_lib import settings
    from export_lib.views.action_tokens import make_token

    return make_token(secret(), user_name, run_key, now=datetime.now(UTC),
                      ttl=settings.ui_token_ttl())


def check_same_origin(request: Request) -> None:
    """403 when the browser says the request comes from another site."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(status_code=403, detail=f"cross-site request from {origin} refused")


def check_token(user_name: str, run_key: str, token: str | None) -> None:
    """403 naming why, unless ``token`` is this user's unexpired token for ``run_key``."""
    from export_lib import settings
    from export_lib.errors import ActionTokenError
    from export_lib.views import action_tokens

    try:
        action_tokens.check_token(secret(), user_name, run_key, token, now=datetime.now(UTC),
                                  ttl=settings.ui_token_ttl())
    except ActionTokenError as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None
