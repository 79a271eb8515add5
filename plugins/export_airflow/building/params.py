"""Trigger-form params whose validation is cheap enough to run on every parse.

Airflow validates a ``Param`` with ``jsonschema.validate``, which first checks the schema itself
against its metaschema; without ``$schema`` that is Draft 2020-12, whose metaschema (dynamic
references over eight vocabularies) costs ~0.25 ms per check. Serialising a DAG validates every
param of every task about twice (each task carries a copy of the DAG's params), which made
params half of an export DAG's serialisation and most of a manual DAG's (issue 25 item 3:
bench/parse.py). Our schemas use Draft 7 keywords only (type, enum, format, items,
uniqueItems, minLength), so they declare Draft 7, whose metaschema check is ~4x cheaper; the
form and the API read the same keywords.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param

DRAFT_7 = "http://json-schema.org/draft-07/schema#"


def param(default: Any = None, *, description: str | None = None, **schema: Any) -> Param:
    """A ``Param`` with ``schema`` declared as JSON Schema Draft 7 (no default: pass none)."""
    args = () if default is None else (default,)
    return Param(*args, description=description, **{"$schema": DRAFT_7, **schema})


def with_form(dag: DAG, params: dict[str, Any]) -> None:
    """Give ``dag`` its trigger form once its tasks exist, so no task carries a copy.

    Params given to ``DAG(...)`` are deep-copied into every task, and Airflow serialises and
    validates each copy on every parse (issue 25 item 3: most of a manual DAG's serialisation).
    Nothing reads a task's copy: a running task's ``params`` are the DAG's, its own and the
    run's conf merged at run time (``airflow.sdk.definitions.param.process_params``), and the
    form and the API validate against the DAG's.
    """
    dag.params = params
