"""export_lib: plain-Python domain library for scheduled data exports.

It never imports Airflow: the Airflow edge lives in ``plugins/export_airflow``. Modules are
imported lazily by their users so ``import export_lib`` stays cheap (the CLI starts fast and
DAG parsing pays only for what it uses).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
