"""Who owns a final key: the run its manifest names (see :mod:`.stores`).

Shared by the local store (``stores``) and the object stores (``cloud``), which ``open_store``
picks from; kept apart so neither store module imports the other for it.
"""

from __future__ import annotations

import json

from export_lib.errors import PublishError


def owner_of(raw: bytes) -> str | None:
    try:
        owner = json.loads(raw).get("run_key")
    except (ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def check_owner(manifest_uri: str, owner: str | None, run_key: str) -> None:
    """Refuse a key whose manifest names another run (or no readable run)."""
    if owner != run_key:
        raise PublishError(
            f"{manifest_uri} says the object belongs to run {owner or '(unreadable)'}, not "
            f"{run_key}; refusing to replace another run's artifact. Artifact names are unique "
            "per run, so look for two configurations writing to one artifact root")


def unowned(uri: str) -> PublishError:
    return PublishError(
        f"{uri} exists with other content and no run claims it (no manifest); refusing to "
        "replace it. If no run recorded it ('exportctl runs'), move it away and publish again")
