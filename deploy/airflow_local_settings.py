"""Not needed any more: the cluster policy and the before-fork preload come with the installed
package, through its ``airflow.policy`` entry point (export_airflow/deploy/policy.py), in every
Airflow process. Kept, empty, so a deployment script that still copies it to
``$AIRFLOW_HOME/config/`` keeps working; delete the copy there when convenient. An older copy,
which imports our two hooks, also keeps working: the entry point's hooks then stand aside, so
nothing is applied twice."""
