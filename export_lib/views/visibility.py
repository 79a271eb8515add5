"""Which companies a reader may see, from the DAGs the reader may read.

Every DAG of a company carries the company id as its second ``__``-separated part:
``widget_export__<company>__<export>``, ``data_export__<company>__<channel>__<kind>``,
``manual_export__<company>`` and ``restatement__<company>``. Company ids are slugs without
``__`` (``config.models.SLUG``), so the mapping is unambiguous. Whoever may read at least one
DAG of a company may see that company's runs on the Export runs page and in ``runs.json``;
nothing else is shown.
"""

from __future__ import annotations

from collections.abc import Iterable

EXPORT_DAG_KINDS = ("widget_export", "data_export", "manual_export", "restatement",
                    "recovery_batch")


def company_of_dag(dag_id: str) -> str | None:
    """The company an export DAG belongs to, or None for any other DAG."""
    parts = dag_id.split("__")
    if len(parts) >= 2 and parts[0] in EXPORT_DAG_KINDS and parts[1]:
        return parts[1]
    return None


def companies_of(dag_ids: Iterable[str]) -> frozenset[str]:
    """The companies of the export DAGs among ``dag_ids``."""
    return frozenset(c for c in map(company_of_dag, dag_ids) if c is not None)
