"""acme's daily-spend export pointed at the PostgreSQL ``metrics`` table (connection
``pg_source``) and delivered to a bucket over the artifact store's connection ``artifacts``:
the shape the object-store tests drive (bytes moved once, object-store faults)."""

from __future__ import annotations

from typing import Any

import yaml


def export_daily_spend_from_pg(world: Any, *, kind: str, dest_bucket: str,
                               csv: dict[str, Any] | None = None) -> None:
    """Rewrite ``acme.yaml`` (timezone UTC, the ``metrics`` query, one ``kind`` destination:
    ``s3`` or ``gcs``) and grant what it uses."""
    path = world.config / "acme.yaml"
    company = yaml.safe_load(path.read_text())
    company["company"]["timezone"] = "UTC"
    daily = next(s for s in company["widget_exports"] if s["id"] == "daily-spend")
    daily["query"] = {"source": "pg_source", "table": "metrics",
                      "columns": ["id", "company_id", "event_time", "label", "value"],
                      "timestamp_column": "event_time", "tenant_column": "company_id",
                      "ingested_column": "ingested_at"}
    if csv is not None:
        daily["csv"] = csv
    daily["destinations"] = [{"id": "dest", "type": kind, "conn_id": "artifacts",
                              "bucket": dest_bucket, "prefix": "acme"}]
    path.write_text(yaml.safe_dump(company, sort_keys=False))
    world.allow_table("pg_source", "metrics")
    world.grant_connection("artifacts", kind)
