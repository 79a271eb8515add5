"""What running inside Airflow provides to export_lib, shared by tasks, callbacks and pages:
``connections`` (Airflow connections as export_lib's resolver), ``ledger`` (the ledger handle
for a task, a callback or the API server) and ``metrics`` (export_lib's metrics through
Airflow's Stats). Imports no other part of export_airflow.
"""
