"""Time tests: Airflow (timetable tests only) needs AIRFLOW_HOME before it is imported.

No global Airflow setup exists yet, so a throwaway home is set here (never the repo, no DB).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-time-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
