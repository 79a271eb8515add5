"""DAG building: which DAGs exist and their shape, decided at parse time.

``dag_factory`` turns the config catalog into each company's export DAGs (and, through
``manual_dag`` and ``restatement``, its manual and restatement DAGs); ``params`` builds their
trigger forms, ``retry_policy`` their retry schedules; ``gap_audit`` and ``retention`` build the
two maintenance DAGs. What the tasks do when they run lives in :mod:`export_airflow.tasks`.

Never imports :mod:`export_airflow.pages` (the layering test in tests/unit/test_layering.py and
``.importlinter`` enforce it), and no module here imports one that imports it back.
"""
