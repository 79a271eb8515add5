"""Artifact stores (local files, S3, GCS): staging objects and fenced, immutable promotion."""
