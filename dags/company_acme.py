"""Export DAGs of company `acme` (config: dags/config/acme.yaml).

Thin loader: the company id is this file's name; see plugins/export_airflow/dag_factory.py.
"""

from airflow.sdk import DAG  # noqa: F401  (Airflow's safe-mode discovery looks for "DAG")
from export_airflow.dag_factory import register_company_dags

register_company_dags(__file__, globals())
