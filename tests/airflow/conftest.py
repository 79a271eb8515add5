"""Airflow-edge tests share the session fixtures of tests/conftest.py (``export_world``)."""
