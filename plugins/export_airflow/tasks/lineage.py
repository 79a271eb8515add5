"""OpenLineage for the export operators (issue 24 item 2, ADR 0027).

Airflow's OpenLineage provider asks each operator for its lineage through
``get_openlineage_facets_on_start`` / ``…_on_complete`` / ``…_on_failure``; the operators hand
those calls to :func:`export_facets` / :func:`deliver_facets` here, which turn
``export_lib.pipeline.lineage`` (which datasets, named without credentials) into the provider's
``OperatorLineage``: input and output datasets with their schema, column lineage (every
exported column copied unchanged from the source column of the same name) and an
``exportRun`` run facet (run key, company, schedule, period, window, time zone, config version;
after publish also the artifact's version, sha256 and URI).

Only imported when OpenLineage is configured (the provider calls these methods only then): a
deployment without a transport pays nothing. A lineage failure never fails an export: the
provider logs it and carries on.
"""

from __future__ import annotations

from typing import Any

import attr
from airflow.providers.common.compat.openlineage.facet import (
    ColumnLineageDatasetFacet,
    Dataset,
    Fields,
    InputField,
    RunFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
)
from airflow.providers.openlineage.extractors import OperatorLineage

from export_lib.pipeline.lineage import LineageDataset, RunLineage

# The facet's schema: docs/reference/lineage.md describes it (no public URL of ours to point at; a URN is a
# URI, which is all OpenLineage asks of ``_schemaURL``).
FACET_SCHEMA = "urn:airflow-scheduled-exports:openlineage:ExportRunFacet:1"


@attr.define
class ExportRunFacet(RunFacet):
    """The export run a task event belongs to (``exportRun`` in the event's run facets)."""

    run_key: str
    company: str
    schedule: str
    period: str
    window_start: str
    window_end: str
    timezone: str
    config_version: str
    version: str | None = None
    sha256: str | None = None
    artifact_uri: str | None = None

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


def dataset(item: LineageDataset) -> Dataset:
    facets: dict[str, Any] = {}
    if item.columns:
        types = item.types or (None,) * len(item.columns)
        facets["schema"] = SchemaDatasetFacet(fields=[
            SchemaDatasetFacetFields(name=column, type=kind)
            for column, kind in zip(item.columns, types, strict=True)])
    if item.columns_from is not None:
        origin = item.columns_from
        facets["columnLineage"] = ColumnLineageDatasetFacet(fields={
            column: Fields(inputFields=[InputField(origin.namespace, origin.name, column)],
                           transformationType="IDENTITY",
                           transformationDescription="exported unchanged")
            for column in item.columns})
    return Dataset(namespace=item.namespace, name=item.name, facets=facets)


def operator_lineage(lineage: RunLineage) -> OperatorLineage:
    return OperatorLineage(inputs=[dataset(i) for i in lineage.inputs],
                           outputs=[dataset(o) for o in lineage.outputs],
                           run_facets={"exportRun": ExportRunFacet(**lineage.run)})


def export_facets(run_key: str) -> OperatorLineage:
    """Render's and publish's lineage: the source table in, the schedule's artifacts out."""
    from export_airflow.runtime.connections import airflow_resolver
    from export_airflow.runtime.ledger import task_ledger
    from export_lib.pipeline.lineage import export_lineage

    return operator_lineage(export_lineage(task_ledger(), run_key, resolver=airflow_resolver()))


def deliver_facets(run_key: str, destination_id: str) -> OperatorLineage:
    """Deliver's lineage: the schedule's artifacts in, the destination out."""
    from export_airflow.runtime.connections import airflow_resolver
    from export_airflow.runtime.ledger import task_ledger
    from export_lib.pipeline.lineage import deliver_lineage

    return operator_lineage(deliver_lineage(task_ledger(), run_key, destination_id,
                                            resolver=airflow_resolver()))
