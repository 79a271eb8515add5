"""Deployment hooks Airflow calls through ``airflow_local_settings.py``
(deploy/airflow_local_settings.py): the cluster policy (queues, pools, priorities, the large-render
pod) and the before-fork preload of the processes that fork tasks and parse children.
"""
