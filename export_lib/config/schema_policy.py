"""``schema_policy``: what a run does when its file's schema differs from the published one.

ADR 0025. Per export, or for every export under ``policies:`` in
``defaults.yaml``; left out it is ``fail``. The first file a schedule publishes makes its
schema the contract; afterwards a run whose columns, types or nullability differ

* ``fail`` — stops with the diff (SchemaContractError); nothing is published;
* ``warn`` — publishes, the new schema becomes the contract, and one alert is sent;
* ``new_major`` — publishes under the next major version of the file name
  (``…__schema-2__v1.csv``); the new schema is that major's contract.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from export_lib.config.limits import shown
from export_lib.config.messages import invalid

SCHEMA_POLICIES = ("fail", "warn", "new_major")


def check_schema_policy(value: Any) -> Any:
    """One of :data:`SCHEMA_POLICIES`; otherwise an error saying what each one does."""
    if value in SCHEMA_POLICIES:
        return value
    close = (difflib.get_close_matches(value.lower(), SCHEMA_POLICIES, n=1, cutoff=0.5)
             if isinstance(value, str) else [])
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise invalid("schema_policy", f"schema_policy {shown(value)} is not one of fail, warn, "
                  "new_major (when the source's columns or types differ from the published "
                  "schema: fail stops the run with the diff, warn publishes and alerts once, "
                  f"new_major publishes the next major version of the file name){hint}")


SchemaPolicy = Annotated[Literal["fail", "warn", "new_major"],
                         BeforeValidator(check_schema_policy)]

__all__ = ["SCHEMA_POLICIES", "SchemaPolicy", "check_schema_policy"]
