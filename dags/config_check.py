"""Makes a company file without a DAG loader (or a loader without a company file) a Broken DAG.

Adding ``config/<id>.yaml`` is not enough on its own: its DAGs come from ``company_<id>.py``.
Rather than let a new company stay silently absent, this file fails to import, naming each
mismatch and the fix (``exportctl loaders dags``); it defines no DAG otherwise. (The words
"airflow" and "DAG" in this docstring are what Airflow's safe-mode discovery looks for.)
"""

from pathlib import Path

from export_lib.config.dag_loaders import check_loaders

_check = check_loaders(Path(__file__).resolve().parent)
if not _check.ok:
    raise ImportError("; ".join(_check.problems()))
