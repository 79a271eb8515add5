"""The Airflow edge of the export library: timetable (and, later, operators and the DAG factory).

``plugins/`` is on ``sys.path`` inside Airflow, so classes here are imported as
``export_airflow.<module>.<Class>`` everywhere (DAG files, the plugin, the scheduler).
"""
