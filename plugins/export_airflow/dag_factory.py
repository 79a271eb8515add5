"""Compatibility path of the DAG factory, which lives in :mod:`export_airflow.building.dag_factory`.

Kept because every generated company loader (``exportctl loaders``; ``LOADER_TEMPLATE`` in
export_lib/config/dag_loaders.py) imports ``register_company_dags`` from here, and those files
sit in each deployment's DAG folder, written once and not rewritten when the package upgrades.
"""

from export_airflow.building.dag_factory import register_company_dags

__all__ = ["register_company_dags"]
