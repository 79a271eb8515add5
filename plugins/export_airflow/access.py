"""Company-scoped users under the FAB auth manager (issue 23 item 4, ADR 0023).

Two roles per company, named from its id, and a DAG-level grant on every DAG of the company:

* ``company_<id>_viewer`` reads that company's DAGs, runs, task logs and XComs and the export
  pages (which ask the auth manager which DAGs a user may read);
* ``company_<id>_operator`` also triggers (manual exports), clears and acts on the pages.

The DAG factory puts :func:`access_control` on each DAG; the dag-processor applies it when it
serialises the DAG (FAB's ``sync_perm_for_dag``), and refuses a DAG whose roles do not exist —
so the roles are made first, from the config, by ``python -m export_airflow.access sync``
(``make run`` and ``make cluster`` run it; run it again after adding a company file).

The roles' own (non-DAG) permissions are FAB's Viewer's minus everything that lists other
tenants' objects: all DAGs, DAG dependencies, assets (their URIs name other companies'
artifacts), import errors, audit logs, jobs and cluster activity. The DAG-level grants decide
the rest: FAB checks a run, task instance or log against the DAG it belongs to.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

VIEWER, OPERATOR = "viewer", "operator"
FAB_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"

# "Plugins": the UI lists plugin views (Browse → Export obligations, Export companies, the
# "Export company" tab) only to users who may read /api/v2/plugins, which names plugins and no
# company's data; the pages themselves scope every answer to the user's companies.
_READ = ("DAG Code", "DAG Runs", "DAG Versions", "DAG Warnings", "Task Instances", "Task Logs",
         "XComs", "HITL Detail", "Pools", "Website", "My Password", "My Profile", "Plugins")
_MENUS = ("Browse", "DAGs", "DAG Runs", "Task Instances", "Docs", "Documentation")
VIEWER_PERMISSIONS = (
    *(("can_read", r) for r in _READ),
    ("can_edit", "My Password"), ("can_edit", "My Profile"),
    *(("menu_access", m) for m in _MENUS),
)
OPERATOR_PERMISSIONS = (
    *VIEWER_PERMISSIONS,
    ("can_create", "DAG Runs"), ("can_edit", "DAG Runs"),
    ("can_create", "Task Instances"), ("can_edit", "Task Instances"),
)


def role_name(company: str, kind: str) -> str:
    """``company_acme_viewer`` / ``company_acme_operator``."""
    return f"company_{company}_{kind}"


def access_control(company: str) -> dict[str, dict[str, set[str]]]:
    """The DAG-level grants of ``company``'s roles on one of its DAGs."""
    return {
        role_name(company, VIEWER): {"DAGs": {"can_read"}, "DAG Runs": {"can_read"}},
        role_name(company, OPERATOR): {"DAGs": {"can_read", "can_edit"},
                                       "DAG Runs": {"can_read", "can_create"}},
    }


@contextmanager
def quiet_access_control() -> Iterator[None]:
    """Build a DAG with ``access_control`` without Airflow 3.3's warning that DAG-level access
    control goes away in Airflow 4: it is still how FAB scopes DAGs in 3.x, and the warning would
    show on every company's DAG file in the UI."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The airflow.security.permissions module")
        yield


def companies_in(config_dir: Path) -> list[str]:
    """Every company file's id (its stem), valid or not: a file that becomes valid later must
    find its roles."""
    return sorted(p.stem for p in Path(config_dir).glob("*.yaml") if p.stem != "defaults")


def company_roles(companies: list[str]) -> list[dict[str, Any]]:
    """FAB's ``bulk_sync_roles`` input for ``companies``."""
    return [{"role": role_name(c, kind), "perms": list(perms)}
            for c in companies
            for kind, perms in ((VIEWER, VIEWER_PERMISSIONS), (OPERATOR, OPERATOR_PERMISSIONS))]


def demo_users(companies: list[str], known: dict[str, Any]) -> dict[str, dict[str, str]]:
    """A viewer and an operator per company (``<id>-viewer``, ``<id>-operator``), keeping the
    passwords of users already in ``known`` (the file from an earlier run)."""
    users = {}
    for company in companies:
        for kind in (VIEWER, OPERATOR):
            name = f"{company}-{kind}"
            old = known.get(name) or {}
            users[name] = {"password": old.get("password") or secrets.token_urlsafe(12),
                           "company": company, "role": kind}
    return users


def sync(config_dir: Path, users_file: Path | None, admin_password: str | None) -> list[str]:
    """Create or update the company roles (and the demo users and admin): idempotent."""
    from export_airflow.airflow_compat import fab_application_builder

    companies = companies_in(config_dir)
    lines = []
    with fab_application_builder() as appbuilder:
        sm = appbuilder.sm
        sm.bulk_sync_roles(company_roles(companies))
        # Narrow as well as widen: a permission this version no longer grants is taken away.
        for company in companies:
            for kind, perms in ((VIEWER, VIEWER_PERMISSIONS), (OPERATOR, OPERATOR_PERMISSIONS)):
                role = sm.find_role(role_name(company, kind))
                for perm in list(role.permissions):
                    pair = (perm.action.name, perm.resource.name)
                    if pair not in perms and not pair[1].startswith(("DAG:", "DAG Run:")):
                        sm.remove_permission_from_role(role, perm)
        lines.append(f"roles: {2 * len(companies)} for {len(companies)} companies "
                     f"({', '.join(companies) or 'none'})")
        if admin_password is not None:
            _user(sm, "admin", sm.find_role("Admin"), admin_password)
        if users_file is not None:
            known = json.loads(users_file.read_text()) if users_file.exists() else {}
            users = demo_users(companies, known)
            for name, user in users.items():
                _user(sm, name, sm.find_role(role_name(user["company"], user["role"])),
                      user["password"])
            users_file.write_text(json.dumps(users, indent=2) + "\n")
            os.chmod(users_file, 0o600)
            lines.append(f"demo users: {len(users)} in {users_file}")
    return lines


def _user(sm: Any, name: str, role: Any, password: str) -> None:
    user = sm.find_user(username=name)
    if user is None:
        sm.add_user(name, name, "user", f"{name}@example.invalid", role, password)
        return
    user.roles = [role]
    sm.update_user(user)
    sm.reset_password(user.id, password)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export_airflow.access",
                                     description="Company roles (and demo users) for FAB.")
    parser.add_argument("command", choices=["sync"])
    parser.add_argument("--config-dir", type=Path, required=True)
    parser.add_argument("--demo-users", type=Path, help="write a viewer and an operator per "
                        "company here (JSON, mode 600), keeping the passwords already there")
    parser.add_argument("--admin-password", help="create or reset the admin user")
    args = parser.parse_args(argv)
    from airflow.configuration import conf

    manager = conf.get("core", "auth_manager")
    if manager != FAB_MANAGER:
        print(f"[core] auth_manager is {manager}, not FAB: no company roles to make "
              "(this auth manager cannot limit users to a company's DAGs)", file=sys.stderr)
        return 0
    for line in sync(args.config_dir, args.demo_users, args.admin_password):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
