"""``exportctl``: the command line over the same pipeline the Airflow operators call."""
