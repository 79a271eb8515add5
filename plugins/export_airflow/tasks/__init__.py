"""What runs inside a task: the operators and sensors (thin adapters over export_lib), catch-up
recovery, OpenLineage facets, task time limits, and the assets an export publishes.

Used by :mod:`export_airflow.building` to build DAGs; never imports the DAG builders or the pages.
"""
